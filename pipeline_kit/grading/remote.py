"""What a check holds of the student's work while grading: proxies that fetch data, probes, the run's seed.

The same check code runs in two places.  In the student's notebook (instant feedback) it gets the student's
live objects and ``probe`` just calls its function.  In the grader (``grade``) a student callable is a
:class:`StudentFunction` whose call runs in the sandboxed kernel and comes back as wire data, and ``probe``
sends the probe function's source to the kernel.  Only the grader's verdict counts.
"""

from __future__ import annotations

import builtins
import contextlib
import importlib
import inspect
import random
import textwrap
import time

from . import wire
from .kernel import KernelDied, StudentTimeout

__all__ = ["KernelDied", "StudentFunction", "StudentTimeout", "grading_seed", "hidden_rng", "kernel_side", "probe"]

DEFAULT_SEED = 0
_session = None  # the GradingSession while the grader runs a test cell; None in a student's kernel
_seed: int | None = None  # outside a grade: the seed :func:`seeded` set, else DEFAULT_SEED


class GradingSession:
    """The grader's link to the kernel for one grade: the seed, a time limit per call and the grade's deadline."""

    def __init__(self, kernel, seed: int, deadline: float | None = None, work=None, off: str | None = None):
        self.kernel, self.seed = kernel, seed
        self.timeout = 60.0
        self.deadline = deadline
        self.work, self.off = work, off  # the grade's folder and sandbox choice, for kit-free runs (kitfree.py)
        self.own_code = None  # names -> sources of the cells a kit-free run executes (set per test cell)

    def limit(self) -> float:
        """Seconds the next call may take: the cell's limit, within the grade's total."""
        if self.deadline is None:
            return self.timeout
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise StudentTimeout("could not run: the grade reached its total time limit (--total-timeout)")
        return min(self.timeout, left)

    def request(self, payload: dict) -> dict:
        reply = self.kernel.request(payload, self.limit())
        if "error" in reply and payload.get("op") == "fetch":  # reading names changes nothing: ask once more
            reply = self.kernel.request(payload, self.limit())
        if "error" in reply:
            raise StudentCodeError(f"the grader's request failed in your kernel: {reply['error']}")
        return reply


def activate(session: GradingSession | None) -> None:
    global _session
    _session = session


@contextlib.contextmanager
def seeded(seed: int):
    """Draw hidden cases with ``seed`` outside a grade meanwhile: what a grade with ``--seed`` would draw (the
    fairness tests run a lab's test cells in one process under many seeds with it)."""
    global _seed
    old, _seed = _seed, int(seed)
    try:
        yield
    finally:
        _seed = old


def grading_seed() -> int:
    """The seed hidden cases are drawn from: the grade's (kept in its JSON report, for the instructor), or 0 outside
    a grade (or the one :func:`seeded` sets)."""
    if _session is not None:
        return _session.seed
    return DEFAULT_SEED if _seed is None else _seed


def hidden_rng(name: str) -> random.Random:
    """A ``random.Random`` for the hidden cases of ``name`` (e.g. a test cell's grade id), from the run's seed.

    Each name gets its own stream, so adding a draw to one cell does not change another's cases.
    """
    return random.Random(f"pipeline-kit:{grading_seed()}:{name}")


class StudentCodeError(Exception):
    """The kernel could not answer a request (the notebook broke the machinery): the check fails."""


class StudentFunction:
    """A callable in the student's kernel, called from the grader: arguments and result cross as data."""

    def __init__(self, name: str, session: GradingSession, type_name: str = "function"):
        self._name, self._session, self._type_name = name, session, type_name
        self.__name__ = self.__qualname__ = name

    def __repr__(self) -> str:
        return f"<your {self._type_name} {self._name}>"

    def __call__(self, *args, **kwargs):
        reply = self._session.request({"op": "call", "name": self._name, "args": _encode_args(args),
                                       "kwargs": _encode_args(kwargs)})
        return unpack_result(reply)


class Opaque:
    """A student value the wire does not carry (a generator, a module...): checks see its type name."""

    def __init__(self, type_name: str):
        self.type_name = type_name

    def __repr__(self) -> str:
        return f"<{self.type_name}>"


def opaque(type_name: str) -> Opaque:
    """An :class:`Opaque` whose class has the original type's name, so feedback says 'got generator'."""
    cls = type(type_name if type_name.isidentifier() else "object", (Opaque,), {})
    return cls(type_name)


def _ref(value):
    if isinstance(value, StudentFunction):
        return {wire.TAG: "student", "v": value._name}
    return None


def _encode_args(value):
    return wire.encode(value, refs=_ref)


def unpack_result(reply: dict):
    if "raised" in reply:
        raise rebuild_exception(reply["raised"])
    return unpack_value(reply.get("result"))


def bound_value(name: str, described: dict, session: GradingSession):
    """What a test cell gets for the student's ``name``, from the kernel's description of it (``serve.describe``):
    a callable becomes a :class:`StudentFunction`, anything else the data it decodes to."""
    if described.get("kind") == "callable":
        return StudentFunction(name, session, str(described.get("type", "function"))[:60])
    try:
        return unpack_value(described)
    except (wire.WireError, StudentCodeError) as exc:
        raise StudentCodeError(f"{name} cannot be read as data: {exc}") from None


def unpack_value(described):
    """A fetched value: data, an :class:`Opaque`, or (for an unsendable one) a failure naming why."""
    if not isinstance(described, dict):
        raise StudentCodeError("the kernel sent a malformed answer")
    kind = described.get("kind")
    if kind == "data":
        return wire.decode(described.get("v"))
    if kind == "opaque":
        return opaque(str(described.get("type", "object"))[:60])
    raise StudentCodeError(str(described.get("message", "the kernel sent a malformed answer"))[:300])


_exception_classes: dict[tuple[str, type], type] = {}
# The kit's exceptions a student's code may raise, rebuilt as the kit's own class so that a check's ``except
# ScheduleError`` works.  A fixed list: the grader never imports a module because the kernel named it.
KIT_EXCEPTIONS = frozenset({
    ("pipeline_kit.schedules.validate", "ScheduleError"), ("pipeline_kit.schedules.generators", "ScheduleConfigError"),
    ("pipeline_kit.schedules.ops", "OpParseError"), ("pipeline_kit.schedules.ops", "ScheduleTextError"),
    ("pipeline_kit.layout.spec", "LayoutError"), ("pipeline_kit.limits", "LimitError"),
    ("pipeline_kit.trace", "TraceError"), ("pipeline_kit.inputs", "InputError"),
    ("pipeline_kit.sim.costs", "CostError"), ("pipeline_kit.sim.blocking_p2p", "ProgramError"),
})


def rebuild_exception(info) -> BaseException:
    """The student's exception as the grader raises it: the kit's own class (from :data:`KIT_EXCEPTIONS` only), or
    a class of the same name derived from the same builtin (so ``except ValueError`` in a check still catches it)."""
    if not isinstance(info, dict):
        return StudentCodeError("the kernel sent a malformed exception")
    name, module = str(info.get("type", "Exception"))[:80], str(info.get("module", ""))[:200]
    message = str(info.get("message", ""))[:2000]
    if (module, name) in KIT_EXCEPTIONS:
        try:
            return getattr(importlib.import_module(module), name)(message)
        except Exception:  # noqa: BLE001 -- a constructor that wants more: fall back to the builtin base
            pass
    base = Exception
    for candidate in info.get("bases", []) if isinstance(info.get("bases"), list) else []:
        cls = getattr(builtins, str(candidate), None)
        if isinstance(cls, type) and issubclass(cls, Exception):
            base = cls
            break
    if not name.isidentifier():
        name = base.__name__
    key = (name, base)
    if key not in _exception_classes:
        _exception_classes[key] = type(name, (base,), {"__module__": "student", "__str__": lambda self: self.text})
    exc = _exception_classes[key].__new__(_exception_classes[key])
    exc.text = message
    exc.args = (message,)
    return exc


def kernel_side(fn):
    """Mark ``fn`` as a probe and keep its source now, at import: a probe sent later must be the code that was
    imported, even if the file changes on disk meanwhile."""
    lines = textwrap.dedent(inspect.getsource(fn)).splitlines(keepends=True)
    while lines and lines[0].lstrip().startswith("@"):
        lines.pop(0)
    fn.probe_source = "".join(lines)
    return fn


def probe(fn, *args, **kwargs):
    """Run ``fn(*args, **kwargs)`` where the student's objects live and return its result as wire data.

    ``fn`` is a top-level function of a check module, decorated with :func:`kernel_side`, that imports what it
    needs in its body.  In a grade its
    source runs in the kernel, with each :class:`StudentFunction` argument replaced by the student's object;
    in the student's notebook it is simply called.  Either way the result comes back through the wire.
    """
    if _session is None:
        return wire.as_data(fn(*args, **kwargs))
    source = getattr(fn, "probe_source", None) or kernel_side(fn).probe_source
    reply = _session.request({"op": "probe", "source": source, "function": fn.__name__,
                              "args": _encode_args(args), "kwargs": _encode_args(kwargs)})
    return unpack_result(reply)
