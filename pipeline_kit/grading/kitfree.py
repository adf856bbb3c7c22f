"""Call a student's function where the kit does not exist: the rule "write it yourself", kept by construction.

Why: a check that grades the student's *own* generator (lab 4's 1F1B phases and order) cannot tell, from the
orders alone, whether they came from the student's code or from the kit's ``one_f_one_b`` -- and no reading of
the code can tell either (``getattr(__import__(...), "one_f" + "_one_b")``, ``exec`` of the kit's source, ...).
So those checks run the answer cells that define the function again, in a fresh sandbox whose file system holds
the Python standard library and nothing else: no kit, no site-packages, no repository.  Every route to the kit's
generators fails there, so an order that comes back was computed by the student's own code.

Where the cells come from: in a grade, from the notebook the grader merged (the last cell above the test cell that
defines each name -- text the grader holds, not something the kernel reports); in the student's notebook, from
the cell IPython compiled the function from, so the notebook gives the same verdict.  A function defined outside
a notebook (a module's, a unit test's lambda) is called as it is: there is no cell to run.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import linecache
import os
import shutil
import tempfile
import time
from pathlib import Path

from . import names, remote, sandbox
from .kernel import JsonLines, StudentTimeout, nonblocking, send_line

RUNNER = Path(__file__).with_name("_kit_free_runner.py")
MAX_LINE = 8 * 2**20  # bytes of one result line
START_TIMEOUT = 60.0
NOTEBOOK_TIMEOUT = 60.0  # seconds per call in the student's notebook (a grade uses its own limits)
WHY = ("the checks of your own generator run it in a Python without the kit (standard library only), so it must "
       "not use the kit's generators: write it yourself -- the kit is for checking your answer, not for giving it")


def cell_sources(func, name: str, needs=()) -> list[str] | None:
    """The sources of the cells that define ``name`` and the functions it ``needs``, in notebook order; None when
    there are none to run (not a notebook's function: call it as it is)."""
    session = remote._session
    if session is not None and session.own_code is not None:
        return session.own_code([name, *needs])
    if not _notebooks(func):
        return None
    found = []
    for wanted in (name, *needs):
        fn = func if wanted == name else getattr(func, "__globals__", {}).get(wanted)
        source = _ipython_cell(fn)
        if source is not None and source not in found:
            found.insert(0, source) if wanted != name else found.append(source)
    return found


def _notebooks(func) -> bool:
    """Whether ``func`` is a notebook's: defined in the ``__main__`` of a running IPython (a cell, or code a cell
    ran with ``exec``, which then has no cell to run without the kit -- as in a grade)."""
    import sys
    shell = sys.modules.get("IPython")
    running = shell is not None and getattr(shell, "get_ipython", lambda: None)() is not None
    return running and getattr(func, "__module__", None) == "__main__"


def _ipython_cell(fn) -> str | None:
    """The whole source of the notebook cell ``fn`` was defined in (IPython keeps each cell in linecache with no
    modification time), or None."""
    code = getattr(inspect.unwrap(fn), "__code__", None) if callable(fn) else None
    entry = linecache.cache.get(code.co_filename) if code is not None else None
    if not entry or entry[1] is not None:
        return None
    return "".join(entry[2])


class KitFree:
    """``name`` from ``sources``, run in a kit-free sandbox and called there; use as a context manager."""

    def __init__(self, name: str, sources: list[str]):
        self.name, self.sources = name, [names.python_source(s) for s in sources]
        self.box = self.lines = None
        self.head: dict | None = None
        self.folder: Path | None = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        if self.box is not None:
            self.box.stop()
        for fd in (getattr(self, "to_runner", None), getattr(self.lines, "fd", None)):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.box = self.lines = self.to_runner = None
        if self.folder is not None and remote._session is None:
            shutil.rmtree(self.folder, ignore_errors=True)

    def _timeout(self) -> float:
        session = remote._session
        return session.limit() if session is not None else NOTEBOOK_TIMEOUT

    def _start(self) -> dict:
        session = remote._session
        off = session.off if session is not None else None
        self.folder = Path(tempfile.mkdtemp(prefix="kit-free-", dir=session.work if session else None))
        to_runner, from_runner = os.pipe(), os.pipe()
        argv = [sandbox.base_python(), "-I", "-S", "{own}/runner.py", "{own}/request.json", str(to_runner[0]),
                str(from_runner[1])]
        request = json.dumps({"sources": self.sources, "function": self.name})
        binds, hide = sandbox.kit_free_paths()
        try:
            # in a grade, as the grade runs kernels; in the notebook, sandboxed where it can be, else as it is
            for attempt in ([off] if session is not None else [None, "the notebook's own run"]):
                host = self.folder / ("off" if attempt else "isolated")
                host.mkdir()
                own = str(host / "own") if attempt else sandbox.OWN
                prog = sandbox.Program([a.replace("{own}", own) for a in argv], {"PATH": "/usr/bin:/bin"}, own,
                                       fds=[to_runner[0], from_runner[1]])
                try:
                    self.box = sandbox.start([prog], host, binds, hide, attempt,
                                             files={"runner.py": RUNNER.read_text(), "request.json": request})
                    break
                except sandbox.SandboxUnavailable:
                    if attempt is not None or session is not None:
                        raise
        finally:
            os.close(to_runner[0])
            os.close(from_runner[1])
        self.to_runner, self.lines = nonblocking(to_runner[1]), JsonLines(from_runner[0], MAX_LINE)
        wait = min(self._timeout(), START_TIMEOUT)
        head = self.lines.get(time.monotonic() + wait)
        if not isinstance(head, dict):
            self.close()
            raise self._timed_out(wait) if head is ... else RuntimeError(
                f"{self.name}: the kit-free run of your answer cells ended before it answered")
        return head

    def _timed_out(self, seconds: float) -> BaseException:
        text = f"timed out after {seconds:g} s in the kit-free run of {self.name} and was stopped"
        return StudentTimeout(text) if remote._session is not None else TimeoutError(text)

    def __call__(self, *args):
        if self.head is None:
            self.head = self._start()
        if not self.head.get("defined"):
            errors = "; ".join(str(e) for e in self.head.get("cell_errors", []))[:600]
            shown = f" ({errors})" if errors else ""
            raise NameError(f"{self.name} is not defined when its answer cell runs without the kit{shown} -- {WHY}")
        limit = self._timeout()
        until = time.monotonic() + limit
        if not send_line(self.to_runner, {"args": list(args)}, until):
            self.close()
            raise self._timed_out(limit)
        reply = self.lines.get(until)
        if reply is ...:
            self.close()
            raise self._timed_out(limit)
        if not isinstance(reply, dict):
            self.close()
            raise RuntimeError(f"the kit-free run of {self.name} ended while it ran (os._exit? out of memory?)")
        if "$raised" in reply:
            info = reply["$raised"]
            if isinstance(info, dict) and set(info.get("bases") or []) & {"NameError", "ImportError"}:
                info = {**info, "message": f"{info.get('message', '')} -- {WHY}"}
            raise remote.rebuild_exception(info)
        return _value(reply.get("value"))


def _value(data, depth: int = 0):
    if depth > 60:
        raise ValueError("the value is nested too deeply")
    if isinstance(data, list):
        return [_value(v, depth + 1) for v in data]
    if isinstance(data, dict):
        if "$t" in data and isinstance(data["$t"], list):
            return tuple(_value(v, depth + 1) for v in data["$t"])
        if "$d" in data and isinstance(data["$d"], list):
            return {_key(p, depth): _value(p[1], depth + 1) for p in data["$d"] if isinstance(p, list) and len(p) == 2}
        return remote.opaque(str(data.get("$o", "object"))[:60])
    return data


def _key(pair, depth):
    key = _value(pair[0], depth + 1)
    return key if isinstance(key, (str, int, float, bool, tuple, type(None))) else repr(key)


@contextlib.contextmanager
def own(func, name: str, needs=()):
    """The function a check of the student's *own* code calls: ``name`` run without the kit (a :class:`KitFree`,
    ended when the block ends), or ``func`` itself when there is no notebook cell to run (see the docstring)."""
    sources = cell_sources(func, name, needs) if callable(func) else None
    if sources is None:
        yield func
        return
    with KitFree(name, sources) as kit_free:
        yield kit_free
