"""The figures check-weights reports, on tensors whose answers are known."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch", reason="the figures are computed with torch")

from omni_cpu.quality import figures  # noqa: E402


def test_kl_of_a_distribution_with_itself_is_zero() -> None:
    logits = torch.randn(3072, generator=torch.Generator().manual_seed(0))
    assert figures.kl_divergence(logits, logits.clone()) == 0.0


def test_kl_matches_the_closed_form_for_two_outcomes() -> None:
    p, q = 0.9, 0.6
    reference = torch.tensor([math.log(p), math.log(1 - p)])
    other = torch.tensor([math.log(q), math.log(1 - q)])
    want = p * math.log(p / q) + (1 - p) * math.log((1 - p) / (1 - q))
    assert figures.kl_divergence(reference, other) == pytest.approx(want, rel=1e-5)


def test_kl_leaves_out_what_the_codec_mask_removes() -> None:
    masked = torch.tensor([0.0, 1.0, -math.inf, 2.0])
    assert figures.kl_divergence(masked, masked.clone()) == 0.0
    shifted = masked.clone()
    shifted[1] = 0.5
    assert 0.0 < figures.kl_divergence(masked, shifted) < math.inf


def test_code_agreement_counts_codes_and_whole_frames() -> None:
    reference = [torch.arange(15), torch.arange(15)]
    codes = [torch.arange(15), torch.arange(15).flip(0)]  # second frame: 1 of 15 equal (the middle)
    assert figures.code_agreement(codes, reference) == {
        "codes_equal": round(16 / 30, 4),
        "frames_all_equal": 0.5,
    }


def _tone(hz: float, frames: int = 10) -> torch.Tensor:
    t = torch.arange(frames * figures.FRAME_SAMPLES) / figures.SAMPLE_RATE
    return 0.3 * torch.sin(2 * math.pi * hz * t)


def test_log_mel_distance_is_zero_for_the_same_wave_one_figure_per_frame() -> None:
    wave = _tone(220.0)
    distance = figures.log_mel_distance_per_frame(wave, wave.clone())
    assert distance == [0.0] * 10


def test_log_mel_distance_sees_a_changed_frame_where_it_changed() -> None:
    wave = _tone(220.0)
    other = wave.clone()
    frame = slice(6 * figures.FRAME_SAMPLES, 7 * figures.FRAME_SAMPLES)
    other[frame] = _tone(3000.0, 1)
    distance = figures.log_mel_distance_per_frame(wave, other)
    assert max(range(10), key=lambda i: distance[i]) == 6
    assert distance[6] > 10.0  # dB: a different pitch, not rounding
    assert distance[0] == distance[1] == 0.0


def test_cosine_of_an_embedding_with_itself_and_its_opposite() -> None:
    embedding = torch.randn(192, generator=torch.Generator().manual_seed(3))
    assert figures.cosine(embedding, embedding) == pytest.approx(1.0)
    assert figures.cosine(embedding, -embedding) == pytest.approx(-1.0)
