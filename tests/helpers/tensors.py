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
