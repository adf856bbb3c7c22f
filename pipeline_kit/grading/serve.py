"""The kernel's side of the wire: answer one grader request with data (runs inside the student's kernel).

Nothing here is trusted: the student can patch this module too.  That gains nothing, because whatever comes
back is only data the grader decodes and checks with its own code -- the same as an answer that returns
anything it likes.  A request is ``{"op": "fetch", "names": [...]}`` (what each name is),
``{"op": "call", "name", "args", "kwargs"}`` (call a student's callable) or ``{"op": "probe", "source",
"function", "args", "kwargs"}`` (run grader-authored code on student objects); the reply is JSON text.
"""

from __future__ import annotations

import base64
import json

from . import wire

MESSAGE_LIMIT = 2000


def serve(request_text: str, namespace: dict) -> str:
    """Answer ``request_text`` using the student's ``namespace``, as base64 text of the JSON reply (so the reply
    crosses the kernel's messages with no escaping, and its size is known before anything is parsed); never
    raises (except an interrupt)."""
    try:
        req = json.loads(request_text)
        op = req["op"]
        if op == "fetch":
            reply = {"values": {name: describe(namespace, name) for name in req["names"]}}
        elif op == "call":
            if req["name"] not in namespace:
                reply = {"raised": {"type": "NameError", "module": "builtins", "bases": ["NameError"],
                                    "message": f"name {req['name']!r} is not defined"}}
            else:
                reply = run(namespace[req["name"]], req, namespace)
        elif op == "probe":
            scope: dict = {"__name__": "pipeline_kit_probe"}
            exec(compile(req["source"], "<grader probe>", "exec"), scope)  # noqa: S102 -- grader-authored code
            reply = run(scope[req["function"]], req, namespace)
        else:
            reply = {"error": f"unknown request {op!r}"}
    except (Exception, SystemExit) as exc:  # noqa: BLE001 -- every failure becomes a reply the grader judges
        reply = {"error": f"{type(exc).__name__}: {_text(exc)}"}
    text = json.dumps(reply, allow_nan=False, separators=(",", ":"))
    if len(text) > wire.MAX_BYTES:
        text = json.dumps({"error": f"the reply takes {len(text):,} bytes, over the limit of {wire.MAX_BYTES:,}"})
    return base64.b64encode(text.encode()).decode()


def describe(namespace: dict, name: str) -> dict:
    if name not in namespace:
        return {"kind": "missing"}
    value = namespace[name]
    if callable(value):
        return {"kind": "callable", "type": type(value).__name__}
    return encoded(value)


def encoded(value) -> dict:
    try:
        return {"kind": "data", "v": wire.encode(value)}
    except wire.Unsendable as exc:
        return {"kind": "opaque", "type": exc.type_name}
    except wire.WireError as exc:
        return {"kind": "error", "message": str(exc)}
    except RecursionError:
        return {"kind": "error", "message": "the value is nested too deeply to send"}


def run(fn, req: dict, namespace: dict) -> dict:
    resolve = namespace.__getitem__
    args = wire.decode(req.get("args", []), resolve)
    kwargs = wire.decode(req.get("kwargs", {}), resolve)
    try:
        result = fn(*args, **kwargs)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 -- the student's exception, described for the grader
        return {"raised": exception_info(exc)}
    return {"result": encoded(result)}


def exception_info(exc: BaseException) -> dict:
    t = type(exc)
    return {"type": t.__name__, "module": t.__module__,
            "bases": [c.__name__ for c in t.__mro__ if c.__module__ == "builtins"], "message": _text(exc)}


def _text(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 -- a __str__ that fails says nothing
        text = ""
    return text if len(text) <= MESSAGE_LIMIT else text[:MESSAGE_LIMIT - 1] + "…"
