"""The student's kernel as the grader sees it: run a cell, or ask for data, each under a time limit.

Why not jupyter_client's manager and channels: everything the kernel sends is the student's to forge (a patched
kernel can send messages of any size, any number of parts, on any socket), and its socket files live where the
student's code writes.  So the grader never touches the kernel's sockets or files.  It starts the kernel and a
relay in one sandbox (:mod:`.sandbox`); the relay (``_kernel_relay.py``) is the only process that speaks ZMQ to the
kernel, and it hands the grader one capped JSON line per execute reply over a pipe.  The grader reads the error of a
cell from that reply (never from outputs the student's code can forge or suppress), and a data request's answer
from the reply's user expression: base64 text of at most :data:`wire.MAX_BYTES` of JSON, checked before it is
decoded.  A cell past its limit is interrupted; a kernel that ignores the interrupt is killed ``KILL_GRACE``
seconds later.
"""

from __future__ import annotations

import base64
import binascii
import fcntl
import json
import os
import re
import secrets
import select
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from . import sandbox, wire
from .parts import OutOfTime

KILL_GRACE = 5.0  # an interrupt reaches a busy Python kernel in milliseconds; five seconds is for a loaded machine
START_TIMEOUT = 120.0
MAX_LINE = 32 * 2**20  # bytes of one line from the relay (a reply's text is at most ~22 MB of base64)
REPLY_NAME = "_pipeline_kit_reply"
RELAY = Path(__file__).with_name("_kernel_relay.py")
BASE64 = re.compile(r"'[A-Za-z0-9+/=]*'")


class StudentTimeout(OutOfTime):
    """The student's code ran past its time limit; a BaseException so that no check can swallow it."""


class KernelDied(BaseException):
    """The kernel died (``os._exit``, a crash, out of memory, or killed after ignoring an interrupt)."""


class KernelUnavailable(Exception):
    """The kernel could not be started at all."""


@dataclass
class CellResult:
    status: str  # "ok", "error", "timeout", "died", "skipped"
    message: str = ""
    earned: float = 0.0  # a test cell that failed in part: the share of its points its passing parts earned


class JsonLines:
    """JSON objects, one a line, from a pipe of a sandboxed program's, each line at most ``limit`` bytes, read
    under a deadline: the one reader of what a relay or a kit-free run sends."""

    def __init__(self, fd: int, limit: int = MAX_LINE):
        self.fd, self.limit, self.buf, self.closed = fd, limit, b"", False

    def get(self, until: float):
        """The next line as a dict; None when the pipe is closed or broken; ``...`` when ``until`` passed."""
        while True:
            if b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                try:
                    item = json.loads(line)
                except ValueError:
                    return self._close()
                return item if isinstance(item, dict) else self._close()
            if self.closed:
                return None
            left = until - time.monotonic()
            if left <= 0:
                return ...
            ready, _, _ = select.select([self.fd], [], [], min(left, 0.5))
            if not ready:
                continue
            try:
                chunk = os.read(self.fd, 1 << 20)
            except OSError:
                chunk = b""
            if not chunk or len(self.buf) + len(chunk) > self.limit:
                return self._close()
            self.buf += chunk

    def _close(self):
        self.closed, self.buf = True, b""
        return None


def send_line(fd: int, obj: dict, until: float) -> bool:
    """Write ``obj`` as one JSON line to a sandboxed program's pipe (opened non-blocking), giving up at ``until``:
    the one writer of what goes to a relay or a kit-free run.  False when it could not (time, or a closed pipe)."""
    data = (json.dumps(obj) + "\n").encode()
    while data:
        left = until - time.monotonic()
        if left <= 0:
            return False
        _, ready, _ = select.select([], [fd], [], min(left, 0.5))
        if ready:
            try:
                data = data[os.write(fd, data):]
            except BlockingIOError:
                continue
            except OSError:
                return False
    return True


def nonblocking(fd: int) -> int:
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
    return fd


class StudentKernel:
    """One started kernel (and its relay) in a fresh sandbox; ``off`` says why it is unisolated, if it is."""

    def __init__(self, work: Path, solutions: Path, off: str | None = None, tag: str = "0"):
        self.box, self.next_id = None, 0
        host = work / f"kernel-{tag}"
        host.mkdir(mode=0o700)  # fresh: a folder that exists already is an error, never reused
        own = str(host / "own") if off else sandbox.OWN
        info = {"transport": "ipc", "ip": f"{own}/ipc/k", "shell_port": 1, "iopub_port": 2, "stdin_port": 3,
                "control_port": 4, "hb_port": 5, "key": secrets.token_hex(32), "signature_scheme": "hmac-sha256",
                "kernel_name": ""}
        to_relay, from_relay = os.pipe(), os.pipe()
        env = {**sandbox.environment(own), "PYTHONPATH": str(sandbox.ROOT)}  # the kit, and nothing else of the host's
        relay = sandbox.Program([sys.executable, "-I", str(RELAY), str(to_relay[0]), str(from_relay[1])], env,
                                f"{own}/cwd", fds=[to_relay[0], from_relay[1]], outside=True)
        kernel = sandbox.Program([sys.executable, "-P", "-m", "ipykernel_launcher", "-f", f"{own}/connection.json"],
                                 env, f"{own}/cwd")
        try:
            self.box = sandbox.start([relay, kernel], host, [] if off else sandbox.kernel_paths(solutions),
                                     [str(solutions.resolve())], off, dirs=("home", "ipython", "mpl", "cwd", "ipc"),
                                     files={"connection.json": json.dumps(info)})
        finally:
            os.close(to_relay[0])
            os.close(from_relay[1])
            if self.box is None:
                os.close(to_relay[1])
                os.close(from_relay[0])
        self.to_relay, self.lines = nonblocking(to_relay[1]), JsonLines(from_relay[0])
        try:  # (an interrupt while the kernel starts must end it too: no caller holds this object yet)
            started = time.monotonic()
            self._send(info, started + START_TIMEOUT)  # the relay's first line: the kernel's connection information
            ready = self.lines.get(started + START_TIMEOUT)
        except BaseException:
            self.shutdown()
            raise
        if not (isinstance(ready, dict) and ready.get("op") == "ready"):
            self.shutdown()
            raise KernelUnavailable("the kernel did not start in time" if ready is ... else "the kernel did not start")

    @property
    def mode(self) -> str:
        return self.box.mode if self.box else "?"

    # -- running code ------------------------------------------------------------------------------------

    def run_cell(self, source: str, timeout: float) -> CellResult:
        """Run one cell; its error, if any, is taken from the execute reply (the notebook's outputs are ignored)."""
        reply, interrupted = self._execute(source, timeout)
        if reply is None:
            return CellResult("died", self._death_message(timeout, interrupted))
        if interrupted:
            return CellResult("timeout", f"timed out after {timeout:g} s (an infinite loop? a wait that never "
                                         "ends?) and was interrupted")
        if reply.get("status") == "ok":
            return CellResult("ok")
        ename, evalue = str(reply.get("ename") or "Error"), str(reply.get("evalue", "")).strip()
        return CellResult("error", f"{ename}: {evalue}" if evalue else ename)

    def request(self, payload: dict, timeout: float) -> dict:
        """Send one data request to ``serve.serve`` in the kernel and return its decoded JSON reply."""
        code = (f"{REPLY_NAME} = __import__('pipeline_kit.grading.serve', fromlist=['serve'])"
                f".serve({json.dumps(payload)!r}, globals())")
        reply, interrupted = self._execute(code, timeout, user_expressions={"r": REPLY_NAME})
        if reply is None:
            raise KernelDied(self._death_message(timeout, interrupted))
        if interrupted:
            raise StudentTimeout(f"timed out after {timeout:g} s and was interrupted")
        return decode_reply(reply)

    def _death_message(self, timeout: float, interrupted: bool) -> str:
        if self.box is not None and self.box.died_of_memory():
            return (f"the kernel was ended: the sandbox's processes together passed the memory limit of a grade "
                    f"({sandbox.TOTAL_MEMORY / 2**30:g} GiB)")
        if interrupted:
            return f"timed out after {timeout:g} s and ignored the interrupt, so the kernel was killed"
        return "the kernel died while running this cell (os._exit, a crash, or out of memory)"

    def _send(self, obj: dict, until: float) -> bool:
        return send_line(self.to_relay, obj, until)

    def _execute(self, code: str, timeout: float, user_expressions=None):
        """(the relay's reply, or None if the kernel died; whether it had to be interrupted)."""
        self.next_id += 1
        rid = self.next_id
        deadline = time.monotonic() + timeout
        if not self._send({"op": "execute", "id": rid, "code": code, "user_expressions": user_expressions or {}},
                          deadline):
            self.kill()
            return None, time.monotonic() >= deadline
        interrupted = False
        while True:
            item = self.lines.get(min(deadline, time.monotonic() + 0.5))
            if item is None:
                self.kill()
                return None, interrupted
            if isinstance(item, dict) and item.get("id") == rid:
                return item, interrupted
            now = time.monotonic()
            if not self.box.alive():
                return None, interrupted
            if now >= deadline and not interrupted:
                interrupted = True
                self._send({"op": "interrupt"}, now + 1.0)
                deadline = now + KILL_GRACE
            elif now >= deadline:
                self.kill()
                return None, True

    def kill(self) -> None:
        if self.box is not None:
            self.box.stop()

    def shutdown(self) -> None:
        self.kill()
        for fd in (getattr(self, "to_relay", None), getattr(getattr(self, "lines", None), "fd", None)):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.to_relay = self.lines = None


def decode_reply(reply: dict) -> dict:
    """A data request's answer: the user expression's text must be the repr of base64 text of at most
    :data:`wire.MAX_BYTES` of JSON holding an object -- checked in that order, before anything is parsed."""
    text = reply.get("text")
    chars = reply["text_chars"] if isinstance(reply.get("text_chars"), int) else \
        len(text) if isinstance(text, str) else 0  # text_chars: the relay's count of a text too long to pass on
    if chars > wire.MAX_BYTES * 4 // 3 + 8:
        return {"error": f"the kernel's answer takes {chars:,} characters, over the limit of a reply "
                         f"({wire.MAX_BYTES:,} bytes of data)"}
    if not isinstance(text, str):
        why = f"{reply.get('ename')}: {reply.get('evalue')}" if reply.get("status") == "error" else \
            str(reply.get("evalue_r", "no value"))[:200]
        return {"error": f"the kernel gave no readable answer ({why}; did the notebook change how the kernel runs "
                         "code?)"}
    if not BASE64.fullmatch(text):
        return {"error": "the kernel's answer is not in the form the grader reads (did the notebook change how the "
                         "kernel runs code?)"}
    try:
        out = json.loads(base64.b64decode(text[1:-1], validate=True))
    except (binascii.Error, ValueError, RecursionError):
        return {"error": "the kernel's answer is not readable data"}
    if not isinstance(out, dict):
        return {"error": "the kernel's answer is not readable data"}
    return out
