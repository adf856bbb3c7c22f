"""How the suite is split, for every test path (tests/ and the solutions' nbval cells alike).

Why at the root: ``pytest solutions/lab04_1f1b_generator.ipynb`` loads no ``tests/conftest.py``, yet its cells must
stay together under ``pytest -n`` (one kernel runs them in order) and count as slow.  The fixtures live in
``tests/conftest.py``.
"""

import os
import re
from pathlib import Path

import pytest

from pipeline_kit.launch import REPLAY_ENV

# The inner loop's subset is ``pytest -m "not slow"`` (the README's quick test command).  A test is slow when it
# starts what takes seconds: a sandboxed grade, a kernel, torchrun, a browser, the book, a solution under nbval,
# or the fairness catalogues' 20 seeds.  Whole files of such tests are listed here; a file that mixes them with
# fast ones marks its slow tests itself (``@pytest.mark.slow``).  A quick run lists any test over QUICK_LIMIT_S.
SLOW_FILES = {
    "test_book.py", "test_book_browser.py", "test_book_cards.py", "test_static_explorer.py", "test_live_explorer.py",
    "test_tutor_browser.py", "test_fairness.py", "test_hidden_cases.py", "test_grading_notebook.py",
    "test_grading_forgery.py", "test_sandbox_attacks.py", "test_sandbox_identity.py", "test_class_grading.py",
    "test_nbgrader_term.py", "test_class_grading_isolation.py", "test_launch_replay.py", "test_runtime_torchrun.py",
    "test_runtime_multi_stage.py", "test_run_boundaries.py", "test_interrupts.py", "test_gpu_check.py",
    "test_figures_shown.py",
}
QUICK_LIMIT_S = 3.0
# A solution's torchrun jobs replay the lab tests' recordings (tests/data/torchrun) where one is current, as the lab
# tests do: nbval checks the notebook runs and prints what it printed; the jobs themselves are tested for real in
# test_runtime_torchrun.py and friends.  Its kernel starts in its first cell's setup and inherits this.
RECORDINGS = Path(__file__).resolve().parent / "tests" / "data" / "torchrun"
_over_quick_limit: list[tuple[float, str]] = []


def _mark_slow(items) -> None:
    for item in items:
        path = Path(str(item.fspath))
        if path.suffix == ".ipynb" or path.name in SLOW_FILES or "book_html" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)


def work_unit(nodeid: str) -> str:
    """What one xdist worker runs together: a file's tests (a notebook's nbval cells share its kernel, a module's
    tests its module-scoped fixtures: a browser, a server, a probe made once), except the fairness catalogue,
    whose entries go by lab (one lab's share the model answer's run, cached per process)."""
    path = nodeid.split("::", 1)[0]
    lab = re.search(r"\[(lab\d\d)", nodeid) if path.endswith("test_fairness.py") else None
    return f"{path}::{lab.group(1)}" if lab else path


try:
    from xdist.scheduler import LoadScopeScheduling
except ImportError:  # pytest without pytest-xdist: one process, nothing to schedule
    LoadScopeScheduling = None

if LoadScopeScheduling is not None:
    class _ByWorkUnit(LoadScopeScheduling):
        """xdist's scope scheduling, its scopes our :func:`work_unit` (its own ``loadgroup`` marks cannot be read
        under pytest 9, whose node ids xdist 3.8 no longer rewrites)."""

        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    def pytest_xdist_make_scheduler(config, log):
        if config.getvalue("dist") == "load":  # pytest -n N's default; --dist each and the like stay xdist's
            return _ByWorkUnit(config, log)
        return None


def pytest_runtest_logreport(report):
    if report.when == "call" and report.duration > QUICK_LIMIT_S and "slow" not in report.keywords:
        _over_quick_limit.append((report.duration, report.nodeid))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if Path(str(item.fspath)).suffix == ".ipynb" and REPLAY_ENV not in os.environ:
        os.environ[REPLAY_ENV] = str(RECORDINGS)
        item.stash[_replay_set] = True


def pytest_runtest_teardown(item):
    if item.stash.get(_replay_set, False):
        os.environ.pop(REPLAY_ENV, None)


_replay_set = pytest.StashKey[bool]()


def pytest_collection_modifyitems(items):
    _mark_slow(items)


def pytest_terminal_summary(terminalreporter):
    if _over_quick_limit:
        terminalreporter.write_line(
            f"{len(_over_quick_limit)} test(s) not marked slow took over {QUICK_LIMIT_S:g} s (mark them "
            "@pytest.mark.slow, or list their file in SLOW_FILES of the root conftest.py): " + ", ".join(
                f"{name} ({seconds:.1f} s)" for seconds, name in sorted(_over_quick_limit, reverse=True)[:10]),
            yellow=True)
