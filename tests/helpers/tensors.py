"""How the kernel and model tests state closeness, and the random weights they multiply.

Imports torch: only modules that `importorskip` the runtime first import it.
"""

from __future__ import annotations

import torch


def relative(got: torch.Tensor, want: torch.Tensor) -> float:
    """The relative error ||got - want|| / ||want||, in float32 whatever the inputs' dtype."""
    return float((got.float() - want.float()).norm() / want.float().norm())


def weight(out_features: int, in_features: int, seed: int = 0, std: float = 0.02) -> torch.Tensor:
    """A float32 (out, in) weight of normal values, the same for the same seed."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(out_features, in_features, generator=generator) * std


def column_picking(
    rows: int, columns: int = 208, in_features: int = 192
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(weight, x, want): a 0/1 weight whose output column j reads x[:, j % in_features], an x
    of small integers (exact in bf16), and the product each column must hold.

    A permuted layout can keep the norm of the error small only by luck; this checks
    that each output column lands in its own place.
    """
    picked = torch.arange(columns) % in_features
    w = torch.zeros(columns, in_features)
    w[torch.arange(columns), picked] = 1.0
    x = torch.arange(rows * in_features, dtype=torch.float32).reshape(rows, in_features) % 97
    return w, x, x[:, picked]
