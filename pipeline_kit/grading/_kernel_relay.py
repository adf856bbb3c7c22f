"""The grader's only line to a student's kernel: a relay that runs inside the kernel's sandbox.

Run as ``python -I _kernel_relay.py IN_FD OUT_FD`` by the sandbox's launcher; the first line on ``IN_FD`` is the
kernel's connection information (not in the command line, which every user of the machine can read).
Why a relay, and why there: the kernel's ZMQ sockets, its messages and its files are the student's to change (a
patched kernel can send a message of any size and any number of parts).  The relay is the one process that touches
them.  It runs in the sandbox's mount, network and user namespaces (it sees the kernel's sockets, nothing of the
host) with the kernel's user and rlimits, but outside its pid namespace (the kernel's processes cannot name it, so
they cannot signal or trace it) and not dumpable; a flood ends the relay, and the grader sees a dead kernel, never
a grader out of memory.  The grader talks to it over two pipes it alone holds, one JSON line each way:

* grader -> relay: ``{"op": "execute", "id": N, "code": ..., "user_expressions": {...}}``, ``{"op": "interrupt"}``
* relay -> grader: ``{"op": "ready"}`` once the kernel answers, then ``{"id": N, "status", "ename", "evalue",
  "text"}`` per execute reply (``text``: the ``text/plain`` of user expression ``r``, or null), each field capped.

Everything it reports is data the grader checks again; the relay decides nothing.
"""

import ctypes
import json
import os
import sys
import time

ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: first, before the kernel can run anything

import zmq  # noqa: E402 -- after the prctl on purpose
from jupyter_client.session import Session  # noqa: E402

MAX_FRAME = 64 * 2**20   # bytes of one message part from the kernel (a larger one drops the connection)
MAX_TEXT = 24 * 2**20    # characters of the user expression's text passed on (a base64 wire reply, 16 MB of JSON)
MAX_LINE = 1 * 2**20     # bytes of one request line from the grader (code and probes are small)
FIELD = 4000             # characters of ename / evalue passed on


def sockets(ctx, info):
    out = {}
    for name in ("shell", "control"):
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME)
        sock.setsockopt(zmq.RCVHWM, 8)
        sock.connect(f"{info['transport']}://{info['ip']}-{info[name + '_port']}")
        out[name] = sock
    return out


def write(fd, obj):
    data = (json.dumps(obj) + "\n").encode()
    while data:
        data = data[os.write(fd, data):]


def result(pending_id, msg):
    content = msg.get("content") if isinstance(msg.get("content"), dict) else {}
    out = {"id": pending_id, "status": str(content.get("status", ""))[:20],
           "ename": str(content.get("ename", ""))[:FIELD], "evalue": str(content.get("evalue", ""))[:FIELD],
           "text": None}
    expr = content.get("user_expressions")
    r = expr.get("r") if isinstance(expr, dict) else None
    if isinstance(r, dict):
        data = r.get("data")
        text = data.get("text/plain") if isinstance(data, dict) else None
        if isinstance(text, str) and len(text) <= MAX_TEXT:
            out["text"] = text
        elif isinstance(text, str):
            out["text_chars"] = len(text)  # too long to pass on; the grader says so
        else:
            out["evalue_r"] = str(r.get("evalue", r.get("status", "no value")))[:FIELD]
    return out


def main():
    fd_in, fd_out = int(sys.argv[1]), int(sys.argv[2])
    buf = b""
    while b"\n" not in buf:
        chunk = os.read(fd_in, 65536)
        if not chunk or len(buf) > MAX_LINE:
            return
        buf += chunk
    line, buf = buf.split(b"\n", 1)
    info = json.loads(line)
    session = Session(key=info["key"].encode(), signature_scheme=info["signature_scheme"])
    ctx = zmq.Context()
    socks = sockets(ctx, info)
    poller = zmq.Poller()
    for sock in socks.values():
        poller.register(sock, zmq.POLLIN)
    poller.register(fd_in, zmq.POLLIN)
    pending, ready, asked = {}, False, 0.0
    while True:
        if not ready and time.monotonic() - asked > 0.5:
            session.send(socks["shell"], "kernel_info_request", {})
            asked = time.monotonic()
        for sock, _ in poller.poll(200):
            if sock == fd_in:
                chunk = os.read(fd_in, 65536)
                if not chunk:
                    return  # the grader is gone
                buf += chunk
                if len(buf) > MAX_LINE and b"\n" not in buf:
                    return
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    req = json.loads(line)
                    if req["op"] == "execute":
                        msg = session.send(socks["shell"], "execute_request", {
                            "code": req["code"], "silent": False, "store_history": False,
                            "user_expressions": req.get("user_expressions", {}), "allow_stdin": False,
                            "stop_on_error": False})
                        pending[msg["header"]["msg_id"]] = req["id"]
                    elif req["op"] == "interrupt":
                        session.send(socks["control"], "interrupt_request", {})
                continue
            try:
                _, msg = session.recv(sock, mode=zmq.NOBLOCK, content=True)
            except Exception:  # noqa: BLE001 -- a malformed or forged message: dropped
                continue
            if msg is None or sock is not socks["shell"]:
                continue
            parent = msg.get("parent_header", {}).get("msg_id") if isinstance(msg.get("parent_header"), dict) else None
            if not ready and msg.get("msg_type") == "kernel_info_reply":
                ready = True
                write(fd_out, {"op": "ready"})
            elif parent in pending and msg.get("msg_type") == "execute_reply":
                write(fd_out, result(pending.pop(parent), msg))


if __name__ == "__main__":
    main()
