"""Parse and validate the planner's Megatron-LM flags with Megatron-LM's own argument parser, without a GPU.

Usage: ``python megatron_args_check.py MEGATRON_SRC WORLD_SIZE LAYERS HIDDEN HEADS SEQ FLAG...``.  Megatron's
``arguments.py`` imports GPU packages (Transformer Engine, apex, triton, ...) that it never calls while parsing;
they are stubbed here so that ``parse_args`` and ``validate_args`` run on a laptop.  Used by
tests/test_plan_published.py when ``PK_MEGATRON_SRC`` names a checkout (``git worktree add DIR core_v0.19.0``).
"""

import importlib.abc
import importlib.machinery
import os
import sys
import types
import typing

STUBBED = ("triton", "transformer_engine", "apex", "flash_attn", "nvidia_resiliency_ext", "tensorstore", "zarr",
           "modelopt", "wandb", "nvtx", "mamba_ssm", "causal_conv1d", "emerging_optimizers", "multistorageclient",
           "flashinfer", "deep_ep", "grouped_gemm", "nv_one_logger", "onelogger")


class _Meta(type):
    """A stub class: calling it or reading an attribute gives another stub."""

    def __call__(cls, *a, **k):
        return _Any(cls.__name__)

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Any(name)


class _Any(types.ModuleType):
    """A stub module: any attribute is a stub, calling it returns itself (or the function it decorates)."""

    def __getattr__(self, name):
        if name == "__version__":
            return "99.0.0"
        if name.startswith("__"):
            raise AttributeError(name)
        made = _Meta(name, (), {}) if name[:1].isupper() or name.startswith("_") else _Any(f"{self.__name__}.{name}")
        setattr(self, name, made)
        return made

    def __call__(self, *a, **k):
        return a[0] if a and callable(a[0]) and not k else self

    def __iter__(self):
        return iter(())

    def __mro_entries__(self, bases):
        return (object,)


class _Stubs(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in STUBBED:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _Any(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


def main() -> None:
    source, world, layers, hidden, heads, seq, *flags = sys.argv[1:]
    typing.override = lambda f: f  # (Python 3.11 has no typing.override; Megatron uses it as a decorator)
    sys.meta_path.insert(0, _Stubs())
    sys.path.insert(0, source)
    os.environ["WORLD_SIZE"], os.environ["RANK"] = world, "0"
    os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"  # what Megatron asks a tensor-parallel job to set
    import torch
    torch.cuda.get_device_properties = lambda *a, **k: types.SimpleNamespace(major=9, minor=0)  # an H100's arch
    from megatron.training.arguments import parse_args, validate_args
    sys.argv = ["pretrain", "--num-layers", layers, "--hidden-size", hidden, "--num-attention-heads", heads,
                "--seq-length", seq, "--max-position-embeddings", seq, "--bf16", *flags]
    args = parse_args()
    validate_args(args)
    print("parsed and validated:", args.tensor_model_parallel_size, args.pipeline_model_parallel_size,
          args.virtual_pipeline_model_parallel_size, args.micro_batch_size, args.global_batch_size,
          args.recompute_granularity, args.use_distributed_optimizer, args.overlap_grad_reduce,
          args.pipeline_model_parallel_layout)


if __name__ == "__main__":
    main()
