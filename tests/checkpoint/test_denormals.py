"""flush_denormals: random-weight timings must not pay for denormal arithmetic."""

from __future__ import annotations

import pytest

from omni_cpu.checkpoint.denormals import flush_denormals


def test_flush_denormals_makes_torch_flush_them_to_zero():
    torch = pytest.importorskip("torch")
    try:
        assert flush_denormals() is True
        assert torch.tensor([1e-323], dtype=torch.float64).item() == 0.0
    finally:
        torch.set_flush_denormal(False)  # the flag is process-wide; leave other tests as they were
