"""Which code-predictor forward a stage runs: the one dispatcher between the predictors.

`OMNI_CPU_CODE_PREDICTOR` (omni_cpu.envs) picks it: the KV-cached forward on vLLM's fused CPU
kernels (omni_cpu.models.fused_predictor, the default), the same cached forward on
the wrapper's own eager modules (omni_cpu.models.cached_predictor, rounding exactly
like stock), or vLLM-Omni's own re-prefill forward (for A/B measurements). Both
cached forwards share `cached_predictor.predict_codes`, the sampling loop.
"""

from __future__ import annotations

import types
from typing import Any

import torch

from omni_cpu.models import fused_predictor
from omni_cpu.models.cached_predictor import cached_forward, predict_codes


def install_forward(wrapper: Any, mode: str = "cached") -> str | None:
    """Replace `wrapper.forward` with the KV-cached one; which one, or None where none applies.

    `fused` falls back to `cached` where the dtype or this vLLM build lacks the
    fused CPU ops (float64 in tests, say). Kernels for the linears are the
    caller's choice (omni_cpu.models.linears.route_linears), before or after.
    """
    config = getattr(wrapper, "_wrapper_config", None)
    if mode == "stock" or config is None or config.return_proj_buf:
        return None
    if not hasattr(wrapper, "model"):
        return None
    if mode == "fused":
        dtype = next(wrapper.model.parameters()).dtype
        if fused_predictor.fused_supported(dtype):
            runner = fused_predictor.FusedRunner(wrapper.model)
            wrapper.forward = types.MethodType(_bound_forward(runner), wrapper)
            return "fused"
    wrapper.forward = types.MethodType(cached_forward, wrapper)
    return "cached"


def _bound_forward(runner: Any) -> Any:
    @torch.inference_mode()
    def fused_forward(self: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        return predict_codes(self, runner, *args, **kwargs)

    return fused_forward
