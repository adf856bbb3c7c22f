"""Hidden cases are drawn per grade (``hidden_rng``): whatever the seed, the model answers pass them.

A grade draws a fresh seed, so a draw the model answer cannot handle (a configuration Megatron refuses, an
edge the answer misses, a result too big for the wire) would cost a student points at random.  This runs each
solution's answer cells once (without its real ``torchrun`` jobs) and then every hidden check that draws its
cases, for several seeds.  The checks reach the answers the way a grade does -- names fetched and functions
called through the kernel's ``serve`` and the wire -- only without the process in between: a CI run once drew a
receive buffer of 1.6 million elements, which the wire refuses, and an in-process call had not noticed.
"""

import ast
import json
import types

import nbformat
import pytest
from lab_grading import SOLUTIONS

from pipeline_kit.grading import kernel, remote, serve
from pipeline_kit.grading.notebook import is_answer, is_test, nbgrader_meta

LABS = ["lab01_schedule_selection", "lab02_timelines", "lab03_bubble", "lab04_1f1b_generator", "lab05_p2p",
        "lab06_stages", "lab07_imbalance", "lab08_interleaved", "lab09_zero_bubble_v", "lab10_planning"]
REAL_RUNS = ("torchrun(", ".real_trace()", ".real_hang(", ".real_summary()", ".grader_run(")
SEEDS = [*range(6), 721020450]  # and the seed of a CI run whose draw the wire refused (see above)


def _hidden_draws(source: str) -> list[str]:
    """The statements of a test cell's hidden part that draw their cases from ``hidden_rng``."""
    hidden = source.split("### BEGIN HIDDEN TESTS", 1)[-1].split("### END HIDDEN TESTS", 1)[0]
    tree = ast.parse(hidden)
    return [ast.get_source_segment(hidden, node) for node in tree.body if "hidden_rng(" in ast.unparse(node)]


class InProcessKernel:
    """The sandboxed kernel's side of a request -- ``serve`` on the solution's namespace, JSON both ways -- in
    this process."""

    def __init__(self, namespace: dict):
        self.namespace = namespace

    def request(self, payload: dict, timeout: float) -> dict:
        return kernel.decode_reply({"text": repr(serve.serve(json.dumps(payload), self.namespace))})


def as_the_grader_sees_it(student: dict, session) -> dict:
    """``student``'s names as a grade binds them (``remote.bound_value``): the notebook's own functions become
    ``StudentFunction`` proxies (arguments and result cross the wire), its data comes back decoded from the
    wire; modules and what the notebook imported (the kit, torch) stay as they are, as the grader imports them."""
    ns = {}
    for name, value in student.items():
        code = getattr(value, "__code__", None)
        imported = callable(value) and (code is None or code.co_filename != "<string>")
        if name.startswith("__") or isinstance(value, types.ModuleType) or imported:
            ns[name] = value
        else:
            ns[name] = remote.bound_value(name, serve.describe(student, name), session)
    return ns


@pytest.mark.parametrize("lab", LABS)
def test_the_model_answer_passes_the_hidden_cases_of_any_seed(lab, one_thread):
    nb = nbformat.read(str(SOLUTIONS / f"{lab}.ipynb"), as_version=4)
    ns: dict = {}
    draws = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        if is_test(cell):
            exec("\n".join(ln for ln in cell.source.splitlines() if ln.startswith(("from ", "import "))), ns)  # noqa: S102
            draws += [(nbgrader_meta(cell)["grade_id"], s) for s in _hidden_draws(cell.source)]
        elif not any(marker in cell.source for marker in REAL_RUNS):
            source = "\n".join(ln for ln in cell.source.splitlines() if not ln.lstrip().startswith(("%", "!")))
            try:
                exec(source, ns)  # noqa: S102 -- the solution's own cells (IPython magics left out)
            except Exception:  # noqa: BLE001 -- a cell that needs a real run's output; its answers are defined
                assert not is_answer(cell) or "def " in cell.source, nbgrader_meta(cell).get("grade_id")
    assert draws, f"{lab} draws no hidden cases"
    kernel = InProcessKernel(ns)
    for seed in SEEDS:
        session = remote.GradingSession(kernel, seed)
        grader = as_the_grader_sees_it(ns, session)
        exec("from pipeline_kit.grading import hidden_rng", grader)  # noqa: S102
        remote.activate(session)
        try:
            for gid, statement in draws:
                try:
                    exec(statement, grader)  # noqa: S102
                except Exception as exc:  # noqa: BLE001 -- say which draw failed
                    raise AssertionError(f"{gid}, seed {seed}: {statement}\n{type(exc).__name__}: {exc}") from exc
        finally:
            remote.activate(None)
