"""What crosses between the student's kernel and the grader: JSON, with a few tagged kinds, never objects.

Why not pickle or live objects: a value from the kernel must not be able to run code or behave differently
in the grader (a ``str`` subclass whose ``__eq__`` is always true, a patched ``SimResult`` property).  So the
kernel *encodes* with this module, the grader *decodes* with its own copy, and decoding builds only plain
values and the kit's own objects, rebuilt by the kit's code (a ``SimResult`` is re-simulated from its schedule
and costs).  Subclasses of builtins become the builtin; numpy values become Python numbers and lists.

Tagged kinds are ``{"$": kind, "v": ...}``; a dict whose keys are not all strings, or that has a ``"$"`` key,
is tagged too.  Imports no torch and no numpy: they are only touched when a value comes from them.
"""

from __future__ import annotations

import dataclasses
import json
import math
from fractions import Fraction

from ..limits import MAX_COST_DENOMINATOR, MAX_FRACTION_BITS, MAX_RESIMULATED_OPS

TAG = "$"
MAX_BYTES = 16 * 2**20   # one encoded message
MAX_DEPTH = 100          # nesting of lists, tuples, dicts and sets
MAX_TENSOR = 1_000_000   # elements of one tensor
# the kit's dataclasses that travel as their fields (module, class)
KIT_RECORDS = {"ModelSpec": ("pipeline_kit.layout.costs", "ModelSpec"),
               "Plan": ("pipeline_kit.layout.balance", "Plan"),
               "ItemTimes": ("pipeline_kit.layout.balance", "ItemTimes")}


class WireError(ValueError):
    """A value cannot be encoded, or a message is not one this module wrote: the message says which."""


class Unsendable(WireError):
    """A value of a type the wire does not carry (a module, a generator, an nn.Module...)."""

    def __init__(self, type_name: str):
        super().__init__(f"a {type_name} cannot be sent as data")
        self.type_name = type_name


# -- encoding ------------------------------------------------------------------------------------------------

def encode(value, refs=None, depth: int = 0):
    """``value`` as JSON-able data.  ``refs(value)`` may return the encoding of a reference (a grader-side
    proxy for a student's object), or None."""
    if depth > MAX_DEPTH:
        raise WireError(f"the value is nested more than {MAX_DEPTH} levels deep")
    t = type(value)
    if value is None or t is bool:
        return value
    if refs is not None:
        ref = refs(value)
        if ref is not None:
            return ref
    sub = depth + 1
    if isinstance(value, int):
        return int.__index__(value)
    if isinstance(value, float):
        f = float.__float__(value)
        return f if math.isfinite(f) else {TAG: "float", "v": repr(f)}
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, Fraction):
        pair = [int(Fraction.numerator.fget(value)), int(Fraction.denominator.fget(value))]
        return {TAG: "fraction", "v": _small(*pair)}
    module = t.__module__ or ""
    if module.startswith("pipeline_kit."):
        return _encode_kit(value, t, refs, sub)
    if module == "numpy" or module.startswith("numpy."):
        return _encode_numpy(value, refs, sub)
    if module.startswith("torch"):
        return _encode_torch(value)
    if isinstance(value, (list, tuple)):
        items = [encode(v, refs, sub) for v in (list.__iter__(value) if isinstance(value, list)
                                                  else tuple.__iter__(value))]
        return items if isinstance(value, list) else {TAG: "tuple", "v": items}
    if isinstance(value, dict):
        pairs = [(k, v) for k, v in dict.items(value)]
        if all(type(k) is str and k != TAG for k, _ in pairs):
            return {k: encode(v, refs, sub) for k, v in pairs}
        return {TAG: "dict", "v": [[encode(k, refs, sub), encode(v, refs, sub)] for k, v in pairs]}
    if isinstance(value, (set, frozenset)):
        kind = "frozenset" if isinstance(value, frozenset) else "set"
        return {TAG: kind, "v": [encode(v, refs, sub) for v in (frozenset.__iter__(value) if kind == "frozenset"
                                                               else set.__iter__(value))]}
    if isinstance(value, range):
        return [encode(v, refs, sub) for v in range(value.start, value.stop, value.step)]
    raise Unsendable(t.__name__)


def _small(*numbers: int, what: str = "a Fraction") -> list[int]:
    """``numbers`` (a Fraction's numerator and denominator, or a cost), refused past ``MAX_FRACTION_BITS``: the
    one size rule for both sides of the wire."""
    if max(abs(n) for n in numbers).bit_length() > MAX_FRACTION_BITS:
        raise WireError(f"{what} of more than {MAX_FRACTION_BITS} bits (MAX_FRACTION_BITS)")
    return list(numbers)


def _encode_kit(value, t, refs, depth):
    name = t.__name__
    if name == "Op" and t.__module__ == "pipeline_kit.schedules.ops":
        return {TAG: "Op", "v": [encode(x, refs, depth) for x in tuple.__iter__(value)]}
    if name == "Schedule" and t.__module__ == "pipeline_kit.schedules.ops":
        return {TAG: "Schedule", "v": {"name": encode(value.name), "pp": encode(value.pp),
                                       "microbatches": encode(value.microbatches), "chunks": encode(value.chunks),
                                       "placement": encode(getattr(value, "placement", "looped")),
                                       "ranks": encode(value.ranks, refs, depth)}}
    if name == "SimResult" and t.__module__ == "pipeline_kit.sim.simulator":
        costs = {k: encode(getattr(value.costs, k), refs, depth)
                 for k in ("fwd", "bwd", "wgrad", "comm", "nbytes", "activation_bytes")}
        return {TAG: "SimResult", "v": {"schedule": encode(value.schedule, refs, depth), "costs": costs}}
    if name == "Layout" and t.__module__ == "pipeline_kit.layout.spec":
        return {TAG: "Layout", "v": str(value)}
    if name in KIT_RECORDS and (t.__module__, name) == KIT_RECORDS[name]:
        return {TAG: name, "v": {f.name: encode(getattr(value, f.name), refs, depth)
                                 for f in dataclasses.fields(value) if f.init}}
    if isinstance(value, tuple):  # the kit's other NamedTuples (Event, Transfer, ...) travel as tuples
        return {TAG: "tuple", "v": [encode(x, refs, depth) for x in tuple.__iter__(value)]}
    raise Unsendable(name)


def _encode_numpy(value, refs, depth):
    import numpy as np
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf":
            raise Unsendable(f"numpy array of {value.dtype}")
        return encode(np.asarray(value).tolist(), refs, depth)
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        return encode(value.item(), refs, depth)
    raise Unsendable(type(value).__name__)


def _encode_torch(value):
    import torch
    if isinstance(value, torch.dtype):
        return {TAG: "dtype", "v": str(value).removeprefix("torch.")}
    if isinstance(value, torch.Tensor):
        plain = torch.Tensor.as_subclass(value, torch.Tensor).detach()
        if plain.numel() > MAX_TENSOR:
            raise WireError(f"a tensor of {plain.numel():,} elements is over the limit of {MAX_TENSOR:,}")
        if plain.is_complex():
            raise Unsendable("complex tensor")
        data = plain.cpu().reshape(-1)
        if data.dtype.is_floating_point and data.dtype not in (torch.float32, torch.float64, torch.float16,
                                                               torch.bfloat16):
            data = data.float()  # float8 kinds: carried as float32 values, rebuilt in their dtype
        values = [v if math.isfinite(v) else {TAG: "float", "v": repr(v)} for v in data.tolist()] \
            if data.dtype.is_floating_point else data.tolist()
        return {TAG: "tensor", "v": {"dtype": str(plain.dtype).removeprefix("torch."), "shape": list(plain.shape),
                                     "requires_grad": bool(value.requires_grad), "data": values}}
    if isinstance(value, torch.Size):
        return {TAG: "tuple", "v": [int(x) for x in value]}
    if isinstance(value, torch.device):
        return str(value)
    raise Unsendable(type(value).__name__)


def dumps(value, refs=None) -> str:
    text = json.dumps(encode(value, refs), allow_nan=False, separators=(",", ":"))
    if len(text) > MAX_BYTES:
        raise WireError(f"the value takes {len(text):,} bytes as data, over the limit of {MAX_BYTES:,}")
    return text


# -- decoding ------------------------------------------------------------------------------------------------

def loads(text: str, resolve=None):
    """The value ``dumps`` encoded; ``resolve(name)`` turns a reference into the object it names."""
    if not isinstance(text, str):
        raise WireError(f"a message must be text, got {type(text).__name__}")
    if len(text) > MAX_BYTES:
        raise WireError(f"a message of {len(text):,} bytes is over the limit of {MAX_BYTES:,}")
    try:
        data = json.loads(text)
    except RecursionError:
        raise WireError(f"the value is nested more than {MAX_DEPTH} levels deep") from None
    except ValueError as exc:
        raise WireError(f"not a wire message ({exc})") from None
    return decode(data, resolve)


def decode(data, resolve=None, depth: int = 0):
    if depth > MAX_DEPTH:
        raise WireError(f"the value is nested more than {MAX_DEPTH} levels deep")
    if data is None or isinstance(data, (bool, int, str)):
        return data
    if isinstance(data, float):
        return data
    sub = depth + 1
    if isinstance(data, list):
        return [decode(v, resolve, sub) for v in data]
    if not isinstance(data, dict):
        raise WireError(f"unexpected {type(data).__name__} in a wire message")
    if TAG not in data:
        return {k: decode(v, resolve, sub) for k, v in data.items()}
    kind, v = data.get(TAG), data.get("v")
    if set(data) != {TAG, "v"} or not isinstance(kind, str):
        raise WireError(f"a malformed tagged value {str(data)[:80]}")
    try:
        return _decode_tagged(kind, v, resolve, sub)
    except WireError:
        raise
    except Exception as exc:  # noqa: BLE001 -- a kit constructor refused the data: the value is malformed
        raise WireError(f"a malformed {kind}: {type(exc).__name__}: {exc}") from None


def _need(cond: bool, kind: str) -> None:
    if not cond:
        raise WireError(f"a malformed {kind}")


def _decode_tagged(kind, v, resolve, depth):  # noqa: C901 -- one branch per kind reads best as a table
    if kind == "float":
        _need(v in ("nan", "inf", "-inf"), kind)
        return float(v)
    if kind == "fraction":
        _need(isinstance(v, list) and len(v) == 2 and all(type(x) is int for x in v) and v[1] != 0, kind)
        return Fraction(*_small(*v))
    if kind in ("tuple", "set", "frozenset"):
        _need(isinstance(v, list), kind)
        items = [decode(x, resolve, depth) for x in v]
        return {"tuple": tuple, "set": set, "frozenset": frozenset}[kind](items)
    if kind == "dict":
        _need(isinstance(v, list) and all(isinstance(p, list) and len(p) == 2 for p in v), kind)
        return {decode(k, resolve, depth): decode(x, resolve, depth) for k, x in v}
    if kind == "student":
        _need(isinstance(v, str) and resolve is not None, kind)
        return resolve(v)
    if kind == "Op":
        from ..schedules.ops import Op
        _need(isinstance(v, list) and len(v) == 3 and v[0] in ("F", "B", "I", "W")
              and all(type(x) is int and x >= 0 for x in v[1:]), kind)
        return Op(*v)
    if kind == "Schedule":
        return _decode_schedule(v, resolve, depth)
    if kind == "SimResult":
        return _decode_simresult(v, resolve, depth)
    if kind == "Layout":
        from ..layout import parse_layout
        _need(isinstance(v, str) and len(v) < 10_000, kind)
        return parse_layout(v)
    if kind in KIT_RECORDS:
        import importlib
        module, name = KIT_RECORDS[kind]
        cls = getattr(importlib.import_module(module), name)
        _need(isinstance(v, dict), kind)
        fields = {f.name for f in dataclasses.fields(cls) if f.init}
        _need(set(v) <= fields, kind)
        return cls(**{k: decode(x, resolve, depth) for k, x in v.items()})
    if kind == "dtype":
        import torch
        dtype = getattr(torch, v, None) if isinstance(v, str) else None
        _need(isinstance(dtype, torch.dtype), kind)
        return dtype
    if kind == "tensor":
        return _decode_tensor(v)
    raise WireError(f"unknown kind {kind!r} in a wire message")


def _decode_schedule(v, resolve, depth):
    from ..schedules.ops import Op, Schedule
    _need(isinstance(v, dict) and set(v) == {"name", "pp", "microbatches", "chunks", "placement", "ranks"}, "Schedule")
    ranks = decode(v["ranks"], resolve, depth)
    _need(isinstance(v["name"], str) and isinstance(ranks, list)
          and all(isinstance(r, list) and all(type(op) is Op for op in r) for r in ranks), "Schedule")
    for key in ("pp", "microbatches", "chunks"):
        _need(type(v[key]) is int and 1 <= v[key] <= 100_000, "Schedule")
    _need(v["placement"] in ("looped", "v"), "Schedule")
    return Schedule(v["name"], v["pp"], v["microbatches"], v["chunks"], ranks, v["placement"])


class _Resolved:
    """Costs already resolved per virtual stage: what ``simulate`` asks a ``Costs`` for."""

    def __init__(self, stage_costs):
        self.stage_costs = stage_costs

    def resolve(self, pp, chunks, placement="looped"):
        return self.stage_costs


def _decode_simresult(v, resolve, depth):
    from ..sim.costs import StageCosts
    from ..sim.simulator import simulate
    _need(isinstance(v, dict) and set(v) == {"schedule", "costs"}, "SimResult")
    schedule = decode(v["schedule"], resolve, depth)
    _need(type(schedule).__name__ == "Schedule" and isinstance(v["costs"], dict), "SimResult")
    ops = sum(len(r) for r in schedule.ranks)
    if ops > MAX_RESIMULATED_OPS:
        raise WireError(f"a SimResult of {ops:,} ops is more than the grader simulates again ({MAX_RESIMULATED_OPS:,}, "
                        "MAX_RESIMULATED_OPS)")
    costs = {}
    for key, length in (("fwd", schedule.stages), ("bwd", schedule.stages), ("wgrad", schedule.stages),
                        ("comm", schedule.stages - 1), ("nbytes", schedule.stages - 1),
                        ("activation_bytes", schedule.stages)):
        values = decode(v["costs"].get(key), resolve, depth)
        _need(isinstance(values, list) and len(values) == length and all(
            isinstance(x, (int, float, Fraction)) and not isinstance(x, bool) and x >= 0 for x in values), "SimResult")
        costs[key] = values
    denominator = 1
    for values in costs.values():
        for x in values:
            if isinstance(x, Fraction):
                denominator = math.lcm(denominator, x.denominator)
            if isinstance(x, int) and not isinstance(x, bool):
                _small(x, what="a SimResult cost")
            if denominator > MAX_COST_DENOMINATOR:
                raise WireError("a SimResult whose Fraction costs have a common denominator over "
                                f"{MAX_COST_DENOMINATOR:,} (MAX_COST_DENOMINATOR)")
    return simulate(schedule, costs=_Resolved(StageCosts(**costs)))


def _decode_tensor(v):
    import torch
    _need(isinstance(v, dict) and set(v) == {"dtype", "shape", "requires_grad", "data"}, "tensor")
    dtype = getattr(torch, v["dtype"], None) if isinstance(v["dtype"], str) else None
    shape, data = v["shape"], v["data"]
    _need(isinstance(dtype, torch.dtype) and isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)
          and isinstance(data, list) and len(data) == math.prod(shape) <= MAX_TENSOR, "tensor")
    values = [decode(x) if isinstance(x, dict) else x for x in data]
    _need(all(isinstance(x, (int, float)) for x in values), "tensor")
    carrier = torch.float32 if dtype.is_floating_point and dtype not in (torch.float64,) else dtype
    out = torch.tensor(values, dtype=carrier).reshape(shape).to(dtype)
    if v["requires_grad"] is True and dtype.is_floating_point:
        out.requires_grad_(True)
    return out


def as_data(value):
    """What the grader would receive for ``value``: the same check gives the same verdict on both sides."""
    return loads(dumps(value))
