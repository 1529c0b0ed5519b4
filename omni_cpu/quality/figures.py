"""The figures `check-weights` and benchmarks/int8_agreement.py report, on plain tensors."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import torch

from omni_cpu.checkpoint.geometry import FRAME_SAMPLES, SAMPLE_RATE

# Log-mel analysis: 40 ms windows every 10 ms, 80 bands up to 12 kHz (the
# codec's band); 8 hops make one codec frame, so each frame gets its own figure.
N_FFT = 1024
WINDOW = 960
HOP = 240
MELS = 80
FMAX_HZ = 12_000.0
POWER_FLOOR = 1e-10  # -100 dB: silence in both waves compares equal, not as log(0)


def kl_divergence(reference_logits: torch.Tensor, logits: torch.Tensor) -> float:
    """KL(reference || other) in nats between the softmax distributions of two logit rows.

    Masked entries (-inf) carry no probability in the reference and are left out;
    one the other format masks where the reference does not would be infinite,
    which two formats of one model never do (the mask is a constant).
    """
    log_p = torch.log_softmax(reference_logits.float(), dim=-1)
    log_q = torch.log_softmax(logits.float(), dim=-1)
    keep = torch.isfinite(log_p)
    p = log_p[keep].exp()
    return max(0.0, float((p * (log_p[keep] - log_q[keep])).sum()))


def code_agreement(
    codes: Sequence[torch.Tensor], reference: Sequence[torch.Tensor]
) -> dict[str, float]:
    """Share of codes equal to the reference's, and share of frames whose codes are all equal.

    A code depends on the codes before it, so a flip early in a frame changes the
    rest: the per-frame share is the strict one.
    """
    pairs = list(zip(codes, reference, strict=True))
    if not pairs:
        return {"codes_equal": 1.0, "frames_all_equal": 1.0}
    total = sum(int(b.numel()) for _, b in pairs)
    equal = sum(int((a == b).sum()) for a, b in pairs)
    whole = sum(bool(torch.equal(a, b)) for a, b in pairs)
    return {
        "codes_equal": round(equal / total, 4),
        "frames_all_equal": round(whole / len(pairs), 4),
    }


def _hz_to_mel(hz: float) -> float:
    return 2595.0 * math.log10(1.0 + hz / 700.0)


@functools.cache
def mel_filters(bins: int = N_FFT // 2 + 1, mels: int = MELS) -> torch.Tensor:
    """Triangular HTK mel filters [mels, bins] from 0 Hz to FMAX_HZ."""
    edges_mel = torch.linspace(0.0, _hz_to_mel(FMAX_HZ), mels + 2)
    edges_hz = 700.0 * (10.0 ** (edges_mel / 2595.0) - 1.0)
    freqs = torch.linspace(0.0, SAMPLE_RATE / 2, bins)
    low, centre, high = edges_hz[:-2, None], edges_hz[1:-1, None], edges_hz[2:, None]
    rising = (freqs - low) / (centre - low)
    falling = (high - freqs) / (high - centre)
    return torch.clamp(torch.minimum(rising, falling), min=0.0)


def log_mel_db(wave: torch.Tensor) -> torch.Tensor:
    """Log-mel power spectrogram in dB, [hops, MELS], of a 24 kHz waveform."""
    wave = wave.float().reshape(-1)
    if wave.numel() < N_FFT:
        wave = torch.nn.functional.pad(wave, (0, N_FFT - wave.numel()))
    spectrum = torch.stft(
        wave,
        N_FFT,
        hop_length=HOP,
        win_length=WINDOW,
        window=torch.hann_window(WINDOW),
        center=True,
        return_complex=True,
    )
    power = spectrum.abs().square()  # [bins, hops]
    mel = mel_filters() @ power
    return 10.0 * torch.log10(mel.clamp(min=POWER_FLOOR)).t()


def log_mel_distance_per_frame(reference: torch.Tensor, other: torch.Tensor) -> list[float]:
    """Mean |log-mel difference| in dB over each codec frame's hops (same-length waves)."""
    a, b = log_mel_db(reference), log_mel_db(other)
    hops = min(a.shape[0], b.shape[0])
    per_hop = (a[:hops] - b[:hops]).abs().mean(dim=1)
    step = FRAME_SAMPLES // HOP
    frames = max(1, reference.numel() // FRAME_SAMPLES)
    return [float(per_hop[i * step : (i + 1) * step].mean()) for i in range(frames)]


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    """Cosine similarity of two embeddings."""
    return float(
        torch.nn.functional.cosine_similarity(a.float().reshape(1, -1), b.float().reshape(1, -1))
    )
