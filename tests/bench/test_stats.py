"""Percentiles and per-stream numbers from fixed chunk arrival lists (no clocks)."""

from __future__ import annotations

import pytest

from omni_cpu.bench.stats import StreamTrace, percentile, summarize_streams

FRAME = 1920


def test_percentile_interpolates_between_ranks_like_numpy() -> None:
    values = [4.0, 1.0, 3.0, 2.0]
    assert percentile(values, 50) == pytest.approx(2.5)
    assert percentile(values, 95) == pytest.approx(3.85)
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 4.0


def test_percentile_of_one_value_is_that_value() -> None:
    assert percentile([0.7], 95) == 0.7


def test_percentile_of_nothing_is_none() -> None:
    assert percentile([], 50) is None


def test_percentile_outside_0_100_is_refused() -> None:
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def _trace(times: list[float], frames: list[int]) -> StreamTrace:
    trace = StreamTrace()
    for at, count in zip(times, frames, strict=True):
        trace.add(at, count * FRAME)
    return trace


def test_stream_rtf_is_wall_to_last_chunk_over_audio_seconds() -> None:
    trace = _trace([0.5, 3.0, 4.0], [1, 25, 24])  # 50 frames = 4 s of audio
    assert trace.ttfa_s == 0.5
    assert trace.audio_s == pytest.approx(4.0)
    assert trace.rtf == pytest.approx(1.0)


def test_cadence_counts_only_frames_after_the_first_chunk() -> None:
    trace = _trace([0.5, 3.0, 4.0], [1, 25, 24])
    assert trace.cadence_ms_per_frame == pytest.approx(3500 / 49)


def test_cadence_needs_two_chunks() -> None:
    assert _trace([0.5], [4]).cadence_ms_per_frame is None


def test_level_summary_throughput_is_all_audio_over_level_wall() -> None:
    traces = [_trace([0.2, 2.0], [1, 24]), _trace([0.4, 2.0], [1, 24])]  # 2 s audio each
    summary = summarize_streams(traces, wall_s=2.0)
    assert summary["requests"] == 2
    assert summary["audio_s_per_wall_s"] == pytest.approx(2.0)
    assert summary["ttfa_p50_s"] == pytest.approx(0.3)
    assert summary["rtf_p95"] == pytest.approx(1.0)
