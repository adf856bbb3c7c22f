"""Where the run happens: backend and device, chosen from what the machine has, and said out loud.

* no CUDA -> ``gloo`` on CPU;
* at least one GPU per local rank -> ``nccl``, rank ``i`` on ``cuda:i``;
* fewer GPUs than local ranks (one GPU is the common student box) -> compute on the shared
  GPU(s), but P2P through ``gloo`` via host memory: NCCL refuses two ranks on one device.

And who this process is: :func:`read_place` checks the variables torchrun sets (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``) before torch reads them, so a bad
value is one :class:`EnvError` line naming the variable, its value and what is allowed -- never torch's
traceback; :func:`init_distributed` turns a busy ``MASTER_PORT`` or a rendezvous that never answers into
such a line too, within a bounded time.  torch is imported only by the functions that need it.
"""

from __future__ import annotations

import datetime
import os
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..inputs import excerpt
from ..interrupts import remove_temporary_files
from ..limits import MAX_RANKS

if TYPE_CHECKING:
    import torch

HANG_GRACE_S = 15.0  # past the process group's own timeout, how long init may take before the watchdog ends it


class EnvError(ValueError):
    """The launcher's environment cannot start a job; ``str(err)`` names the variable, its value and what is allowed."""


@dataclass(frozen=True)
class Place:
    """This process in the job, from the launcher's variables; ``addr`` is None for a process of its own."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    local_world: int = 1
    addr: str | None = None
    port: int | None = None  # None: a process of its own takes any free port


@dataclass
class RunEnv:
    rank: int
    world: int
    local_rank: int
    local_world: int
    backend: str
    device: torch.device
    reason: str

    @property
    def stage_through_host(self) -> bool:
        """True when tensors live on a GPU but travel through gloo (copied via host memory)."""
        return self.backend == "gloo" and self.device.type == "cuda"

    def describe(self) -> str:
        return (f"pipeline-kit: {self.world} rank(s), backend {self.backend}, device "
                f"{'cuda:*' if self.device.type == 'cuda' else self.device.type}: {self.reason}")


def choose(local_world: int, cuda_devices: int, requested: str | None = None) -> tuple[str, str, str]:
    """``(backend, device type, reason)`` for ``local_world`` ranks on a node with ``cuda_devices`` GPUs."""
    if requested == "gloo" or (requested is None and cuda_devices == 0):
        if cuda_devices == 0:
            return "gloo", "cpu", "no CUDA device found, so gloo on CPU"
        return "gloo", "cpu", "gloo on CPU as requested (--backend gloo)"
    if requested == "nccl" and cuda_devices == 0:
        raise ValueError("--backend nccl needs CUDA devices, and none was found; use --backend gloo or leave it out")
    if cuda_devices >= local_world:
        return "nccl", "cuda", f"{cuda_devices} GPU(s) for {local_world} local rank(s): one GPU per rank, nccl"
    if requested == "nccl":
        raise ValueError(f"--backend nccl needs one GPU per rank, but {local_world} local ranks share "
                         f"{cuda_devices} GPU(s); NCCL refuses two ranks on one device")
    return "gloo", "cuda", (f"{local_world} local ranks share {cuda_devices} GPU(s): compute on the GPU, P2P through "
                            f"gloo via host memory (NCCL refuses two ranks on one device)")


def _integer(environ: Mapping[str, str], name: str, default: int, low: int, high: int, meaning: str) -> int:
    text = environ.get(name)
    if text is None:
        return default
    digits = text.strip()
    if not (digits.isascii() and digits.isdigit() and len(digits) <= 9 and low <= int(digits) <= high):
        raise EnvError(f"{name} {excerpt(text, limit=30)} is not an integer from {low} to {high} ({meaning})")
    return int(digits)


def read_place(environ: Mapping[str, str] = os.environ) -> Place:
    """This process's place in the job, from the launcher's variables (unset: a job of one process)."""
    world = _integer(environ, "WORLD_SIZE", 1, 1, MAX_RANKS, "the number of processes in the job, at most "
                                                              "MAX_RANKS; torchrun sets it")
    rank = _integer(environ, "RANK", 0, 0, world - 1, f"this process's number, below WORLD_SIZE {world}; torchrun "
                                                      "sets it")
    local_world = _integer(environ, "LOCAL_WORLD_SIZE", 1, 1, world, f"the processes on this machine, at most "
                                                                     f"WORLD_SIZE {world}; torchrun sets it")
    local_high = local_world - 1 if "LOCAL_WORLD_SIZE" in environ else world - 1
    local_rank = _integer(environ, "LOCAL_RANK", 0, 0, local_high, "this process's number on its machine, below "
                                                                   "LOCAL_WORLD_SIZE; torchrun sets it")
    addr = environ.get("MASTER_ADDR") or None  # empty is unset, as torch takes it
    if addr is not None:
        missing = [name for name in ("RANK", "WORLD_SIZE", "MASTER_PORT") if name not in environ]
        if missing:
            names = ", ".join(missing[:-1]) + (" and " if len(missing) > 1 else "") + missing[-1]
            raise EnvError(f"MASTER_ADDR is set ({excerpt(addr, limit=30)}) but {names} "
                           f"{'is' if len(missing) == 1 else 'are'} not: a job of several processes needs RANK, "
                           "WORLD_SIZE, MASTER_ADDR and MASTER_PORT (torchrun sets all four); unset MASTER_ADDR to "
                           "run a single process")
    elif world > 1:
        raise EnvError(f"WORLD_SIZE is {world} but MASTER_ADDR is not set: the processes of a job meet at "
                       "MASTER_ADDR:MASTER_PORT (torchrun sets both); start the job with torchrun")
    port = None
    if "MASTER_PORT" in environ:
        port = _integer(environ, "MASTER_PORT", 0, 1, 65535, "the TCP port where the job's processes meet")
    return Place(rank, world, local_rank, local_world, addr, port)


def init_distributed(backend: str | None = None, timeout_s: float = 60.0, place: Place | None = None,
                     say: Callable[[str], None] | None = None) -> RunEnv:
    """Initialise ``torch.distributed`` from torchrun's environment variables (or a single process).

    Raises :class:`EnvError` for a bad variable, a ``MASTER_PORT`` another program holds, or a rendezvous that
    fails; should the rendezvous hang past its own timeout (a client that reached a program that is not a store
    waits for ever), a watchdog passes the one line to ``say`` (default: standard error) and ends the process."""
    import torch
    import torch.distributed as dist

    place = place or read_place()
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    chosen, device_type, reason = choose(place.local_world, gpus, backend)
    device = torch.device("cpu")
    if device_type == "cuda":
        device = torch.device("cuda", place.local_rank % gpus)
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        seconds = max(timeout_s, 30.0) + 30
        timeout = datetime.timedelta(seconds=seconds)
        kwargs = {"device_id": device} if chosen == "nccl" else {}
        addr, port = place.addr or "127.0.0.1", place.port
        hang = threading.Timer(seconds + HANG_GRACE_S, _end_hung_rendezvous, (place, seconds, say))
        hang.daemon = True
        hang.start()
        try:
            if place.addr is None:  # plain `python -m pipeline_kit.run`: a world of one, its store on a free port
                kwargs.update(store=dist.TCPStore(addr, port or 0, 1, True, timeout=timeout), rank=0, world_size=1)
            dist.init_process_group(chosen, timeout=timeout, **kwargs)
        except dist.DistError as exc:
            if "EADDRINUSE" in str(exc) or "address already in use" in str(exc).lower():
                raise EnvError(f"MASTER_PORT {port} on {addr} is already in use by another program; free it or "
                               "pick another port") from None
            raise EnvError(f"{_rendezvous(place)} failed: {' '.join(str(exc).split())[:300]}") from None
        finally:
            hang.cancel()
    return RunEnv(place.rank, place.world, place.local_rank, place.local_world, chosen, device, reason)


def _rendezvous(place: Place) -> str:
    return (f"rank {place.rank}'s rendezvous at MASTER_ADDR {excerpt(place.addr or '127.0.0.1', limit=30)} "
            f"MASTER_PORT {place.port}")


def _end_hung_rendezvous(place: Place, seconds: float, say: Callable[[str], None] | None) -> None:
    message = (f"{_rendezvous(place)} did not complete in {seconds + HANG_GRACE_S:g} s: is rank 0 running, and is "
               "that port its store's and not another program's?")
    try:
        remove_temporary_files()
        (say or (lambda text: print(text, file=sys.stderr, flush=True)))(message)
    finally:
        os._exit(2)
