"""Flush denormal floats to zero in this process, so random-weight timings tell the truth.

Random weights (fp32 above all: the codec decoder, an fp32 talker) drive some
activations into denormal range, which x86 CPUs handle in microcode many times
slower than normal floats; a trained model rarely goes there. Measured here:
the reference fp32 run was 3.6x slower than bf16 until denormals were flushed.
Call `flush_denormals()` early in every stage process (it sets the FTZ/DAZ bits
for the calling thread and the threads torch starts afterwards).
"""

from __future__ import annotations


def flush_denormals() -> bool:
    """Turn on flush-to-zero via torch when torch is importable; True if it took effect."""
    try:
        import torch  # imported here: the checkpoint writer and the CLI do not need torch
    except ImportError:
        return False
    return bool(torch.set_flush_denormal(True))
