"""Run a student's answer cells in a Python with no kit, then answer calls of one function (stdlib only).

Run as ``python -I -S RUNNER REQUEST.json IN_FD OUT_FD`` inside a sandbox whose file system holds no kit and no
site-packages (:mod:`pipeline_kit.grading.kitfree`).  The request names the cells' sources and the function; each
line on ``IN_FD`` is one call (``{"args": [...]}``, JSON), each line on ``OUT_FD`` one result.  The student's code
may write anything anywhere in here: what comes back is only ever its own function's return values, checked again
by the grader.
"""

import json
import os
import sys

MAX_MESSAGE = 2000


def plain(value, depth=0):
    """The value as JSON data: lists, tuples, dicts and scalars; anything else only by its type's name."""
    if depth > 50:
        return {"$o": "nested too deeply"}
    if value is None or type(value) in (bool, int, float, str):
        return value
    if type(value) is list:
        return [plain(v, depth + 1) for v in value]
    if type(value) is tuple:
        return {"$t": [plain(v, depth + 1) for v in value]}
    if type(value) is dict:
        return {"$d": [[plain(k, depth + 1), plain(v, depth + 1)] for k, v in value.items()]}
    return {"$o": type(value).__name__}


def raised(exc):
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 -- a __str__ that fails says nothing
        text = ""
    t = type(exc)
    return {"$raised": {"type": t.__name__, "module": t.__module__,
                        "bases": [c.__name__ for c in t.__mro__ if c.__module__ == "builtins"],
                        "message": text[:MAX_MESSAGE]}}


def send(fd, obj):
    try:
        data = json.dumps(obj)
    except (TypeError, ValueError):
        data = json.dumps({"value": {"$o": "unencodable value"}})
    data = (data + "\n").encode()
    while data:
        data = data[os.write(fd, data):]


def main():
    requests, out = os.fdopen(int(sys.argv[2]), "r"), int(sys.argv[3])
    with open(sys.argv[1]) as f:
        req = json.load(f)
    namespace = {"__name__": "__main__"}
    errors = []
    for source in req["sources"]:
        try:
            exec(compile(source, "<your answer cell>", "exec"), namespace)  # noqa: S102 -- the student's own cell
        except BaseException as exc:  # noqa: BLE001 -- reported, and the next cell still runs
            errors.append(f"{type(exc).__name__}: {exc}"[:MAX_MESSAGE])
    fn = namespace.get(req["function"])
    send(out, {"defined": callable(fn), "cell_errors": errors})
    for line in requests:
        args = json.loads(line)["args"]
        try:
            reply = {"value": plain(fn(*args))}
        except BaseException as exc:  # noqa: BLE001 -- the student's exception, described for the grader
            reply = raised(exc)
        send(out, reply)


if __name__ == "__main__":
    main()
