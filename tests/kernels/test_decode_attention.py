"""omni-cpu's one-position attention computes what SDPA computes, within rounding.

The kernel (omni_cpu/kernels/csrc/attention_decode.cpp) serves the code
predictor's steps after the first: one query per row over a frame's cache of up
to 17 positions, grouped-query heads. Checked against float32 SDPA: float32
inputs to 1e-5 relative (the same sums in another order); bf16 inputs to 1 %
(the inputs' own rounding is 0.4 %, the result is rounded once more). A wrong
head-to-group mapping, a missed position or a wrong scale gives errors of
order 1.
"""

from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="the inference runtime is not installed")

import torch

from omni_cpu.kernels import gemv
from tests.helpers.attention import one_position_case
from tests.helpers.tensors import relative

pytestmark = [
    pytest.mark.core_model,
    pytest.mark.cpu,
    pytest.mark.skipif(not gemv.cpu_supports(), reason="this CPU lacks avx512_bf16/avx512_vnni"),
]


@pytest.mark.parametrize("dtype,tolerance", [(torch.float32, 1e-5), (torch.bfloat16, 0.01)])
@pytest.mark.parametrize("bsz,heads,groups", [(1, 16, 8), (3, 4, 4), (2, 6, 2)])
@pytest.mark.parametrize("end", [1, 2, 9, 17])
def test_one_position_attention_matches_sdpa(dtype, tolerance, bsz, heads, groups, end):
    case = one_position_case(dtype, bsz, heads, groups, end)
    got = gemv.decode_attention(case.q, case.keys, case.values, end, case.scale)
    assert got.dtype == dtype and got.shape == case.q.shape
    assert relative(got, case.want()) < tolerance


def test_head_sizes_the_kernel_cannot_take_fall_back_to_the_caller():
    q, cache = torch.randn(1, 4 * 24), torch.randn(1, 2, 5, 24)
    assert gemv.decode_attention(q, cache, cache, 3, 0.2) is None
    assert gemv.decode_attention(q.double(), cache.double(), cache.double(), 3, 0.2) is None
