"""Which code-predictor forward a stage runs: the one dispatcher between the predictors.

The talker's `code_predictor` choice (omni_cpu.profile.choices) picks it:
- `fused` (the default), the KV-cached forward: in one C++ call per position or frame
  (omni_cpu.models.predictor_step) where omni-cpu's GEMV took every layer's linears,
  else on vLLM's fused CPU kernels (omni_cpu.models.fused_predictor: float32 on oneDNN,
  FBGEMM's int8, the GEMV off), else on the wrapper's own eager modules
  (omni_cpu.models.cached_predictor) where this vLLM build lacks those kernels. The two
  fallbacks are fused's own, not choices.
- `stock`, vLLM-Omni's own re-prefill forward: the reference the agreement tests hold
  `fused` to (tests/platforms/test_stock_agreement.py), and the way back if it misbehaves.
The cached forwards share `cached_predictor.predict_codes`, the sampling loop.
"""

from __future__ import annotations

import types
from typing import Any

import torch

from omni_cpu.models import fused_predictor
from omni_cpu.models.cached_predictor import cached_forward, predict_codes
from omni_cpu.models.predictor_step import StepRunner


def install_forward(wrapper: Any, mode: str = "fused") -> str | None:
    """Replace `wrapper.forward` with the KV-cached one; which one, or None where none applies.

    `fused` is the one-call step ("step") where it applies, else vLLM's fused CPU ops
    ("fused"), else the eager cached forward ("cached": the dtype or this vLLM build lacks
    the fused CPU ops, float64 in tests, say); `stock` keeps vLLM-Omni's. Kernels for the
    linears are the caller's choice (omni_cpu.models.linears.route_linears), before: the
    step takes the packed weights of the linears the GEMV took.
    """
    config = getattr(wrapper, "_wrapper_config", None)
    if mode == "stock" or config is None or config.return_proj_buf:
        return None
    if not hasattr(wrapper, "model"):
        return None
    step = StepRunner.build(wrapper)
    if step is not None:
        wrapper.forward = types.MethodType(_bound_forward(step), wrapper)
        return "step"
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
