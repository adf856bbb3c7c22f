"""Where the run happens: backend and device, chosen from what the machine has, and said out loud.

* no CUDA -> ``gloo`` on CPU;
* at least one GPU per local rank -> ``nccl``, rank ``i`` on ``cuda:i``;
* fewer GPUs than local ranks (one GPU is the common student box) -> compute on the shared
  GPU(s), but P2P through ``gloo`` via host memory: NCCL refuses two ranks on one device.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


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


def init_distributed(backend: str | None = None, timeout_s: float = 60.0) -> RunEnv:
    """Initialise ``torch.distributed`` from torchrun's environment variables (or a single process)."""
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    chosen, device_type, reason = choose(local_world, gpus, backend)
    device = torch.device("cpu")
    if device_type == "cuda":
        device = torch.device("cuda", local_rank % gpus)
        torch.cuda.set_device(device)
    if "MASTER_ADDR" not in os.environ:  # plain `python -m pipeline_kit.run`: a world of one
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
        os.environ.setdefault("RANK", "0")
        os.environ.setdefault("WORLD_SIZE", "1")
    if not dist.is_initialized():
        kwargs = {"device_id": device} if chosen == "nccl" else {}
        dist.init_process_group(chosen, timeout=datetime.timedelta(seconds=max(timeout_s, 30.0) + 30), **kwargs)
    return RunEnv(rank, world, local_rank, local_world, chosen, device, reason)
