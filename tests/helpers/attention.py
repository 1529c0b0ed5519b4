"""The one-position attention's reference (float32 SDPA) and the cases both builds are held to.

Imports torch: only modules that `importorskip` the runtime first import it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

CACHED = 17  # positions in a frame's cache: the code predictor's 2 + 15 steps


def reference(q, keys, values, end, scale, heads):
    """Float32 SDPA of one query per row over the first `end` cached positions."""
    bsz, groups, _, dim = keys.shape
    out = F.scaled_dot_product_attention(
        q.float().view(bsz, 1, heads, dim).transpose(1, 2),
        keys[:, :, :end].float(),
        values[:, :, :end].float(),
        scale=scale,
        enable_gqa=heads != groups,
    )
    return out.transpose(1, 2).reshape(bsz, heads * dim)


@dataclass(frozen=True)
class AttentionCase:
    """One call of the kernel: a query per row and a cache whose positions past `end` are stale."""

    q: torch.Tensor
    keys: torch.Tensor
    values: torch.Tensor
    end: int
    scale: float
    heads: int

    def want(self) -> torch.Tensor:
        return reference(self.q, self.keys, self.values, self.end, self.scale, self.heads)


def one_position_case(
    dtype: torch.dtype, bsz: int, heads: int, groups: int, end: int
) -> AttentionCase:
    """Random inputs in `dtype` (head size 128 for 16 heads, else 32), seeded by the shape."""
    generator = torch.Generator().manual_seed(end * 31 + heads)
    dim = 128 if heads == 16 else 32
    q = torch.randn(bsz, heads * dim, generator=generator).to(dtype)
    keys = torch.randn(bsz, groups, CACHED, dim, generator=generator).to(dtype)
    values = torch.randn(bsz, groups, CACHED, dim, generator=generator).to(dtype)
    keys[:, :, end:] = 1e4  # positions past `end` are stale: they must not count
    return AttentionCase(q, keys, values, end, dim**-0.5, heads)
