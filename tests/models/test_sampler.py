"""vLLM's CPU random sampler, eager: same race, no compile, no pick of a removed token."""

from __future__ import annotations

import pytest
import torch

from omni_cpu.models.sampler import eager_random_sample, install_eager_random_sample


def test_frequencies_follow_the_probabilities():
    torch.manual_seed(0)
    probs = torch.tensor([0.6, 0.3, 0.1, 0.0])
    logits = probs.log().expand(20_000, 4).clone()  # log(0) = -inf: a removed token
    counts = torch.bincount(eager_random_sample(logits), minlength=4).float() / 20_000
    assert counts[3] == 0
    assert torch.allclose(counts[:3], probs[:3], atol=0.015)


def test_zero_noise_never_picks_a_removed_token(monkeypatch):
    # pytorch#151218: eager exponential_ can return 0; vLLM compiles its sampler to avoid
    # the inf/nan that then wins the argmax. Force the worst case: every draw 0.
    monkeypatch.setattr(torch.Tensor, "exponential_", lambda self, *a, **k: self.zero_())
    logits = torch.tensor([[float("-inf"), 0.0, float("-inf"), -1.0]])
    assert eager_random_sample(logits).tolist() == [1]


def test_installed_into_vllms_cpu_sampler_without_a_compile():
    topk_topp_sampler = pytest.importorskip("vllm.v1.sample.ops.topk_topp_sampler")

    previous = install_eager_random_sample()
    try:
        sampler = topk_topp_sampler.TopKTopPSampler()
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        logits = torch.randn(2, 3072)
        tokens, _ = sampler.forward_cpu(logits, {}, None, None)
        assert tokens.shape == (2,)
        assert topk_topp_sampler.compiled_random_sample is eager_random_sample
        assert torch._dynamo.utils.counters["frames"]["total"] == 0  # nothing was traced
    finally:
        topk_topp_sampler.compiled_random_sample = previous
