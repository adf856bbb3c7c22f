"""The student's kernel as the grader sees it: run a cell, or ask for data, each under a time limit.

Why not nbclient: the grader needs two things nbclient does not give -- data requests whose answer it reads
from the execute reply (never from outputs the student's code can forge or suppress), and a kernel started
inside the sandbox.  So this is a small loop over jupyter_client.  Outputs are read and dropped; the
kernel's own stdout and stderr go to /dev/null.  A cell past its limit is interrupted; a kernel that ignores
the interrupt is killed ``KILL_GRACE`` seconds later.
"""

from __future__ import annotations

import ast
import json
import logging
import queue
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from . import sandbox

KILL_GRACE = 5.0  # an interrupt reaches a busy Python kernel in milliseconds; five seconds is for a loaded machine
START_TIMEOUT = 120.0
MAX_MESSAGE = 64 * 2**20  # bytes of one message from the kernel; a bigger one drops the connection
REPLY_NAME = "_pipeline_kit_reply"


class StudentTimeout(BaseException):
    """The student's code ran past its time limit; a BaseException so that no check can swallow it."""


class KernelDied(BaseException):
    """The kernel died (``os._exit``, a crash, out of memory, or killed after ignoring an interrupt)."""


class KernelUnavailable(Exception):
    """The kernel could not be started at all."""


@dataclass
class CellResult:
    status: str  # "ok", "error", "timeout", "died", "skipped"
    message: str = ""


class StudentKernel:
    """One started kernel.  ``warn`` receives the one-line warning when the sandbox is unavailable."""

    def __init__(self, work: Path, solutions: Path, sandboxed: bool = True, warn=None, tag: str = "0"):
        self.work, self.solutions, self.warn = work, solutions, warn
        self.sandboxed = sandboxed
        self.km = self.kc = None
        self._start(tag)

    def _start(self, tag: str) -> None:
        from jupyter_client import KernelManager
        from jupyter_client.kernelspec import KernelSpecManager
        place = sandbox.prepare(self.work, self.solutions, self.sandboxed, tag)
        ksm = KernelSpecManager(kernel_dirs=[str(place.spec_dir)])
        km = KernelManager(kernel_name=sandbox.KERNEL_NAME, kernel_spec_manager=ksm, transport="ipc",
                           ip=str(place.ipc_prefix), connection_file=str(place.connection_file))
        km.log.setLevel(logging.CRITICAL)
        self.km = km
        try:
            km.start_kernel(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            cwd=str(place.status_file.parent / "cwd"))
            kc = km.client()
            kc.start_channels()
            for channel in (kc.shell_channel, kc.iopub_channel):
                _cap_messages(channel)
        except Exception as exc:  # noqa: BLE001 -- jupyter_client, zmq and OS errors: one line for the user
            self.shutdown()
            raise KernelUnavailable(f"the kernel did not start ({type(exc).__name__}: {exc})") from None
        self.kc = kc
        try:
            kc.wait_for_ready(timeout=START_TIMEOUT)
        except RuntimeError as exc:
            status = place.status()
            self.shutdown()
            if self.sandboxed and status.get("ok") is False:
                self._fallback(status.get("why", "the sandbox failed"), tag)
                return
            raise KernelUnavailable(f"the kernel did not start ({exc})") from None
        status = place.status()
        if self.sandboxed and status.get("ok") is False:
            self._note_unsandboxed(status.get("why", "unknown reason"))

    def _fallback(self, why: str, tag: str) -> None:
        self._note_unsandboxed(why)
        self.sandboxed = False
        self._start(tag + "-plain")

    def _note_unsandboxed(self, why: str) -> None:
        if self.warn:
            self.warn(sandbox.unsandboxed_warning(why))

    # -- running code ------------------------------------------------------------------------------------

    def run_cell(self, source: str, timeout: float) -> CellResult:
        """Run one cell; its error, if any, is taken from the execute reply (the notebook's outputs are ignored)."""
        reply, interrupted = self._execute(source, timeout)
        if reply is None:
            return CellResult("died", self._death_message(timeout, interrupted))
        content = reply["content"]
        if interrupted:
            return CellResult("timeout", f"timed out after {timeout:g} s (an infinite loop? a wait that never "
                                         "ends?) and was interrupted")
        if content.get("status") == "ok":
            return CellResult("ok")
        ename, evalue = str(content.get("ename", "Error")), str(content.get("evalue", "")).strip()
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
        content = reply["content"]
        try:
            text = ast.literal_eval(content["user_expressions"]["r"]["data"]["text/plain"])
            out = json.loads(text)
            if not isinstance(out, dict):
                raise ValueError("not an object")
        except (KeyError, TypeError, ValueError, SyntaxError, MemoryError, RecursionError):
            why = f"{content.get('ename')}: {content.get('evalue')}" if content.get("status") == "error" else \
                str(content.get("user_expressions", {}).get("r", {}).get("evalue", "no value"))[:200]
            return {"error": f"the kernel gave no readable answer ({why}; did the notebook change how the kernel "
                             "runs code?)"}
        return out

    def _death_message(self, timeout: float, interrupted: bool) -> str:
        if interrupted:
            return f"timed out after {timeout:g} s and ignored the interrupt, so the kernel was killed"
        return "the kernel died while running this cell (os._exit, a crash, or out of memory)"

    def _execute(self, code: str, timeout: float, user_expressions=None):
        """(reply or None if the kernel died, whether it had to be interrupted)."""
        kc, km = self.kc, self.km
        msg_id = kc.execute(code, silent=False, store_history=False, user_expressions=user_expressions or {},
                            allow_stdin=False)
        deadline = time.monotonic() + timeout
        interrupted = False
        while True:
            self._drain_iopub()
            try:
                msg = kc.get_shell_msg(timeout=0.05)
            except queue.Empty:
                msg = None
            if msg is not None and msg.get("parent_header", {}).get("msg_id") == msg_id:
                return msg, interrupted
            now = time.monotonic()
            if not km.is_alive():
                return None, interrupted
            if now > deadline and not interrupted:
                interrupted = True
                km.interrupt_kernel()
                deadline = now + KILL_GRACE
            elif now > deadline:
                self.kill()
                return None, True

    def _drain_iopub(self, most: int = 1000) -> None:
        """Drop the kernel's outputs (at most ``most`` per call, so a flood cannot keep the deadline from coming)."""
        for _ in range(most):
            try:
                self.kc.get_iopub_msg(timeout=0)
            except queue.Empty:
                return

    def kill(self) -> None:
        if self.km is not None and self.km.has_kernel:
            try:
                self.km.shutdown_kernel(now=True)
            except Exception:  # noqa: BLE001 -- already gone
                pass

    def shutdown(self) -> None:
        if self.kc is not None:
            self.kc.stop_channels()
        if self.km is not None:
            try:
                self.km.shutdown_kernel(now=True)
            except Exception:  # noqa: BLE001 -- already gone
                pass
            self.km.cleanup_resources()
        self.km = self.kc = None


def _cap_messages(channel) -> None:
    """Cap the size of one message from the kernel (zmq applies the option to connections made after it)."""
    import zmq
    sock = channel.socket
    endpoint = sock.getsockopt(zmq.LAST_ENDPOINT).decode()
    sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE)
    sock.disconnect(endpoint)
    sock.connect(endpoint)
