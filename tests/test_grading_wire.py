"""What crosses from the student's kernel to the grader is plain data, rebuilt by the grader's own code; and
`grade` answers any malformed notebook with a result or one line, never a traceback."""

import json
import resource
import subprocess
import sys
import time
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lab_grading import ROOT

from pipeline_kit.grading import hidden_rng, names, remote, wire
from pipeline_kit.layout import PRESETS, parse_layout
from pipeline_kit.schedules import build_schedule
from pipeline_kit.sim import simulate
from pipeline_kit.sim.simulator import SimResult


class Always(str):
    def __eq__(self, other):
        return True

    __hash__ = str.__hash__


class AlwaysInt(int):
    def __eq__(self, other):
        return True

    __hash__ = int.__hash__


def test_subclasses_of_builtins_arrive_as_the_builtin():
    got = wire.as_data({"s": Always("x"), "i": AlwaysInt(7), "t": (Always("y"),), Always("k"): {AlwaysInt(1)}})
    assert type(got["s"]) is str and got["s"] != "anything else"
    assert type(got["i"]) is int and got["i"] != 8
    assert type(got["t"]) is tuple and type(got["t"][0]) is str
    assert {type(k) for k in got} == {str} and type(next(iter(got["k"]))) is int


def test_kinds_keep_their_type():
    value = {1: [Fraction(3, 11), float("nan"), float("-inf")], "set": {1, 2}, "fs": frozenset({(1, "a")}),
             "$": "a dict key that looks like a tag"}
    got = wire.as_data(value)
    assert got[1][0] == Fraction(3, 11) and got[1][1] != got[1][1] and got[1][2] == float("-inf")
    assert got["set"] == {1, 2} and got["fs"] == frozenset({(1, "a")}) and got["$"] == value["$"]


def test_numpy_values_become_python_numbers():
    np = pytest.importorskip("numpy")
    got = wire.as_data({"i": np.int64(3), "f": np.float32(0.5), "a": np.arange(3)})
    assert got == {"i": 3, "f": 0.5, "a": [0, 1, 2]} and type(got["i"]) is int


def test_a_patched_simresult_is_rebuilt_by_the_simulator(monkeypatch):
    result = simulate(build_schedule("1f1b", 4, 8), fwd=Fraction(1), bwd=[2, 2, 4, 2], p2p_latency=Fraction(1, 10))
    text = wire.dumps(result)
    monkeypatch.setattr(SimResult, "bubble_fraction", property(lambda self: 0.5))  # as a kernel could
    assert wire.loads(text).bubble_fraction == 0.5
    monkeypatch.undo()
    rebuilt = wire.loads(text)
    assert rebuilt.makespan == result.makespan and rebuilt.bubble_fraction == result.bubble_fraction
    assert rebuilt.schedule.ranks == result.schedule.ranks


def test_kit_records_round_trip():
    spec = PRESETS["bank-pp8"][0]
    assert wire.as_data(spec) == spec
    assert str(wire.as_data(parse_layout("Et*3|t*2|t*2|tL"))) == "Et*3|t*2|t*2|tL"


def test_unsendable_and_oversized_values_are_refused():
    with pytest.raises(wire.Unsendable, match="generator"):
        wire.dumps(x for x in range(3))
    deep: list = []
    cur = deep
    for _ in range(wire.MAX_DEPTH + 5):
        cur.append([])
        cur = cur[0]
    with pytest.raises(wire.WireError, match="nested"):
        wire.dumps(deep)
    with pytest.raises(wire.WireError, match="nested"):
        wire.loads("[" * 200_000 + "]" * 200_000)
    with pytest.raises(wire.WireError, match="over the limit"):
        wire.loads(" " * (wire.MAX_BYTES + 1))


@pytest.mark.parametrize("text", ['{"$": "fraction", "v": [1, 0]}', '{"$": "nope", "v": 1}', '{"$": "set"}',
                                  '{"$": "Op", "v": ["X", 1, 0]}', '{"$": "tuple", "v": 5, "x": 1}'])
def test_malformed_tags_are_refused(text):
    with pytest.raises(wire.WireError):
        wire.loads(text)


def test_student_exceptions_are_rebuilt_from_builtin_or_kit_classes():
    from pipeline_kit.layout import LayoutError
    exc = remote.rebuild_exception({"type": "MyError", "module": "__main__", "bases": ["ValueError", "Exception"],
                                    "message": "bad input"})
    assert isinstance(exc, ValueError) and type(exc).__name__ == "MyError" and str(exc) == "bad input"
    assert isinstance(remote.rebuild_exception({"type": "LayoutError", "module": "pipeline_kit.layout.spec",
                                                "bases": [], "message": "x"}), LayoutError)
    forged = remote.rebuild_exception({"type": "LabCheckFailed", "module": "pipeline_kit.course.labs.common",
                                       "bases": ["AssertionError"], "message": "passed"})
    assert type(forged).__module__ == "student"  # a student cannot raise the grader's own failure class


def test_hidden_cases_follow_the_grade_seed():
    assert hidden_rng("cell").random() == hidden_rng("cell").random()  # seed 0 outside a grade
    draws = {}
    for seed in (1, 2):
        remote.activate(remote.GradingSession(kernel=None, seed=seed))
        try:
            draws[seed] = [hidden_rng("cell").random(), hidden_rng("other").random()]
            assert draws[seed][0] == hidden_rng("cell").random()
        finally:
            remote.activate(None)
    assert draws[1] != draws[2] and draws[1][0] != draws[1][1]


def test_names_resolve_from_the_canonical_notebook():
    cells = [("given", "given_1", "%matplotlib inline\nfrom pipeline_kit.sim import simulate\ndata = 5\n"),
             ("answer", "a", "def f(x):\n    return simulate\n"),
             ("test", "t1", "from pipeline_kit.course.labs import lab01\nbase = 1\nlab01.check(f, data, simulate)\n"),
             ("test", "t2", "lab01.check(base, max)")]
    resolver = names.Resolver(cells)
    first = resolver.origins(2)
    assert first["f"].side == names.STUDENT and not first["f"].given_variable
    assert first["data"].side == names.STUDENT and first["data"].given_variable
    assert first["simulate"].side == names.IMPORT and first["simulate"].statement == \
        "from pipeline_kit.sim import simulate"
    assert set(resolver.origins(3)) == {"lab01", "base"}  # builtins stay the grader's
    assert names.audit(cells) == [("t1", "data")]
    assert names.kernel_prelude("import a\nx = 1\ncheck(x)\n### BEGIN HIDDEN TESTS\ny = 2\n### END HIDDEN TESTS\n") \
        == "import a\nx = 1"


# -- malformed notebooks: `grade` answers in one line ---------------------------------------------------------

LEAF = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.text(max_size=6))
JSON = st.recursive(LEAF, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
                    max_leaves=6)
BLANK = st.one_of(st.just(""), st.just(" \n"), st.lists(st.sampled_from(["", " "]), max_size=2), st.integers(),
                  st.none())
CELL = st.one_of(JSON, st.fixed_dictionaries({
    "cell_type": st.sampled_from(["markdown", "raw", "code", 3, None]),
    "metadata": st.one_of(JSON, st.fixed_dictionaries({"nbgrader": JSON, "pipeline_kit": JSON})),
    "source": BLANK}))
NOTEBOOK = st.one_of(JSON, st.fixed_dictionaries({
    "nbformat": st.sampled_from([4, 3, "4", None]), "nbformat_minor": st.integers(0, 5),
    "metadata": st.one_of(JSON, st.fixed_dictionaries({"pipeline_kit": st.one_of(
        JSON, st.fixed_dictionaries({"lab": st.one_of(st.just("lab01_tiny"), JSON)}))})),
    "cells": st.one_of(JSON, st.lists(CELL, max_size=4))}))


@pytest.fixture(scope="module")
def tiny_solutions(tmp_path_factory):
    """A canonical lab without code cells: a notebook that passes every check is graded without a kernel."""
    folder = tmp_path_factory.mktemp("solutions")
    (folder / "lab01_tiny.ipynb").write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {
        "pipeline_kit": {"lab": "lab01_tiny"}}, "cells": [{"cell_type": "markdown", "metadata": {}, "source": "hi"}]}))
    return folder


def _limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(NOTEBOOK.map(json.dumps), st.binary(max_size=40).map(lambda b: b.decode("latin-1")),
                 st.sampled_from(["[" * 50_000, '{"nbformat": 4, "cells": ' + "[" * 50_000])))
@pytest.mark.slow
def test_grade_answers_malformed_notebooks_in_one_line(tmp_path, tiny_solutions, text):
    path = tmp_path / "lab01_tiny.ipynb"
    path.write_text(text, encoding="utf-8", errors="surrogateescape")
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pipeline_kit", "grade", str(path), "--solutions",
                           str(tiny_solutions)], capture_output=True, text=True, timeout=60, cwd=ROOT,
                          preexec_fn=_limit_memory, check=False)
    assert proc.returncode in (0, 1, 2) and "Traceback" not in proc.stderr, proc.stderr
    assert time.monotonic() - start < 30
    if proc.returncode == 2:
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.slow
def test_make_labs_check_names_a_corrupt_solution(tmp_path):
    (tmp_path / "lab01_broken.ipynb").write_text('{"cells": [')
    proc = subprocess.run([sys.executable, "-m", "pipeline_kit", "make-labs", "--check", "--solutions", str(tmp_path),
                           "--labs", str(tmp_path.parent / f"{tmp_path.name}-labs")], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, check=False)  # (labs inside the solutions would be refused)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "lab01_broken.ipynb: not a readable notebook" in proc.stderr
