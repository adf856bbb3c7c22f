"""Ctrl-C and SIGTERM end a command with one line, "interrupted" -- no traceback, no temporary files left.

Two situations, two mechanisms:

* The command line (:func:`interrupts_end_in_one_line`) runs Python code: SIGTERM is turned into
  the same ``KeyboardInterrupt`` as Ctrl-C, so ``finally`` blocks and ``with`` statements remove
  temporary files and stop child processes on the way out; the block then prints one line and
  sets the exit status ``128 + signal`` (130 for Ctrl-C, 143 for SIGTERM), as shells expect.
* A ``torch.distributed`` rank (:func:`exit_on_signals_from_a_watcher`) spends its time blocked
  inside C (gloo receives, barriers), where a Python signal handler would not run until the call
  returns -- maybe never.  So the signals are blocked in every thread and one watcher thread waits
  for them, removes this process's temporary files, prints one line (rank 0 only, so a 4-rank
  job says it once instead of printing four KeyboardInterrupt tracebacks) and ends the process.

:func:`atomic_output` writes a result through a temporary file that both mechanisms remove, so an
interrupted command never leaves a half-written ``--json``, ``--trace`` or image file.  No torch.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

TEMPORARY_FILES: set[str] = set()  # written by write_file_atomically, not yet renamed into place
_watcher_started = False


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM arrived; ``signum`` says which."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass
class Outcome:
    exit_code: int | None = None  # set when the block was interrupted


def remove_temporary_files() -> None:
    for path in list(TEMPORARY_FILES):
        try:
            os.unlink(path)
        except OSError:
            pass
        TEMPORARY_FILES.discard(path)


def shown_in_any_encoding() -> None:
    """Let standard output and error replace what the terminal's encoding cannot show.

    Why: the kit's messages use "—", "…", "✓" and "×"; under an ISO-8859-1 locale or ``PYTHONIOENCODING=latin-1``
    a strict stream ends the command with a ``UnicodeEncodeError`` after its work is done.  Replaced, the reader
    sees ``?`` for a dash and the rest of the message; ``--json`` is ASCII already (``strict_json`` escapes).
    Every command starts inside :func:`interrupts_end_in_one_line`, which calls this."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and getattr(stream, "errors", "strict") == "strict":
            try:
                reconfigure(errors="replace")
            except (ValueError, OSError):  # a stream already closed or detached: nothing to print to anyway
                pass


@contextmanager
def interrupts_end_in_one_line(prog: str) -> Iterator[Outcome]:
    """Run the block; Ctrl-C or SIGTERM inside it print ``"{prog}: interrupted"`` and set ``exit_code``.

    A second signal during the clean-up is ignored, so clean-up is not itself interrupted.  Signal
    handlers can only be set from the main thread; elsewhere the block runs unchanged.
    """
    outcome = Outcome()
    shown_in_any_encoding()
    main = threading.current_thread() is threading.main_thread()
    saved = {}
    if main:
        def on_signal(signum, frame):
            for sig in saved:
                signal.signal(sig, signal.SIG_IGN)
            raise Interrupted(signum)

        for sig in (signal.SIGINT, signal.SIGTERM):
            saved[sig] = signal.getsignal(sig)
            signal.signal(sig, on_signal)
    try:
        yield outcome
    except KeyboardInterrupt as exc:
        remove_temporary_files()
        print(f"{prog}: interrupted", file=sys.stderr, flush=True)
        outcome.exit_code = 128 + getattr(exc, "signum", signal.SIGINT)
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


class OutputStreamError(OSError):
    """Standard output could not be written (a full disk, an I/O error); ``str(err)`` is the one line to print."""

    def __str__(self) -> str:
        return str(self.strerror)


class _GuardedStream:
    """``sys.stdout`` for a command: a write or flush that fails says so as :class:`OutputStreamError`, naming
    the stream, instead of the bare ``OSError`` a ``print`` would raise from anywhere."""

    def __init__(self, stream, name: str):
        self._stream, self._name = stream, name

    def _guard(self, call, *args):
        try:
            return call(*args)
        except BrokenPipeError:  # the reader went away (``| head``): not an error of the command's
            raise
        except OSError as exc:
            raise OutputStreamError(exc.errno, f"cannot write to {self._name}: {exc.strerror or exc}") from None

    def write(self, text):
        return self._guard(self._stream.write, text)

    def flush(self):
        return self._guard(self._stream.flush)

    def __getattr__(self, name):
        return getattr(self._stream, name)


@contextmanager
def standard_output_guarded() -> Iterator[None]:
    """Run the block with ``sys.stdout`` guarded; the caller flushes inside it.  A closed pipe or a failed write
    then leaves standard output pointing at ``/dev/null``, so the interpreter's own flush at exit cannot print
    "Exception ignored ..." after the command's one line."""
    real = sys.stdout
    sys.stdout = _GuardedStream(real, "standard output")
    try:
        yield
    except OSError:
        _silence(real)
        raise
    finally:
        sys.stdout = real


def _silence(stream) -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def exit_on_signals_from_a_watcher(say: Callable[[int], None]) -> None:
    """Block SIGINT and SIGTERM in this thread and every thread started after it; a watcher thread
    takes them, removes :data:`TEMPORARY_FILES`, calls ``say(signum)`` and ends the process with
    ``128 + signum`` -- whatever the other threads are blocked in.  Call it before starting threads."""
    global _watcher_started
    if _watcher_started:
        return
    wanted = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, wanted)

    def watch() -> None:
        signum = signal.sigwait(wanted)
        try:
            remove_temporary_files()
            say(signum)
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(128 + signum)

    threading.Thread(target=watch, name="pipeline-kit-signal-watcher", daemon=True).start()
    _watcher_started = True


@contextmanager
def atomic_output(path: str) -> Iterator[str]:
    """A temporary path in ``path``'s folder, with its suffix (so writers that go by the extension still
    work), renamed to ``path`` when the block ends without an error, removed otherwise -- and removed on
    Ctrl-C or SIGTERM too (it is in :data:`TEMPORARY_FILES` meanwhile): readers see the old file or the
    whole new one, never half of it.  A link is followed (the file it names is replaced, the link stays); a
    FIFO, device or socket is never replaced (:func:`pipeline_kit.inputs.check_output_path` refused it before
    any work; this is the same rule at the moment of writing)."""
    path = os.path.realpath(path)
    if os.path.exists(path) and not os.path.isfile(path):
        raise IsADirectoryError(errno.EISDIR if os.path.isdir(path) else errno.EEXIST,
                                "not a regular file: an output replaces only a regular file", path)
    folder = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix=".pipeline-kit-", suffix=os.path.splitext(path)[1] or ".tmp", dir=folder)
    os.close(fd)
    TEMPORARY_FILES.add(tmp)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # what open(path, "w") would have made, not mkstemp's 0600
        yield tmp
        os.replace(tmp, path)
    finally:
        TEMPORARY_FILES.discard(tmp)
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_file_atomically(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through :func:`atomic_output`."""
    with atomic_output(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)


def end_process(proc, grace: float = 15.0) -> None:
    """End a child ``subprocess.Popen``: SIGTERM, which lets it clean up (a grade ends its sandbox and removes its
    folder), then SIGKILL after ``grace`` seconds; returns once it is gone."""
    import subprocess

    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
