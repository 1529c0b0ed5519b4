"""Percentiles and per-stream numbers from fixed chunk arrival lists (no clocks)."""

from __future__ import annotations

import pytest

from omni_cpu.bench.stats import percentile, summarize_streams
from omni_cpu.speech.playback import StreamTrace

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


# What a listener hears: one 1-frame chunk at 0.4 s, then 10 frames at 1.3 s and 10 at 2.0 s.
# Offsets 0, 0.08 and 0.88 s: arrival - offset is 0.4, 1.22 and 1.12.
def _gappy() -> StreamTrace:
    return _trace([0.4, 1.3, 2.0], [1, 10, 10])


def test_safe_start_is_the_largest_arrival_minus_audio_offset() -> None:
    assert _gappy().safe_start_s == pytest.approx(1.22)


def test_a_stream_whose_chunks_come_before_they_play_is_safe_at_first_audio() -> None:
    trace = _trace([0.3, 0.35, 1.0], [1, 10, 10])  # 0.35 - 0.08, 1.0 - 0.88: never late
    assert trace.safe_start_s == pytest.approx(0.3)
    assert trace.playback(0.3).gaps == 0


def test_a_player_starting_at_the_safe_start_never_goes_silent() -> None:
    trace = _gappy()
    run = trace.playback(trace.safe_start_s)
    assert (run.gaps, run.silence_s) == (0, 0.0)


def test_a_late_chunk_stalls_the_player_and_delays_the_rest() -> None:
    run = _gappy().playback(0.65)  # first audio + 250 ms
    # Chunk 1 plays at 0.73, arrives 1.3: 0.57 s of silence; chunk 2 is then due at
    # 0.65 + 0.88 + 0.57 = 2.10 and arrived at 2.0: no second gap.
    assert run.gaps == 1
    assert run.silence_s == pytest.approx(0.57)
    assert run.chunk_play_s == pytest.approx([0.65, 1.3, 2.10])


def test_a_chunk_late_by_less_than_the_tolerance_is_not_a_gap() -> None:
    trace = _trace([0.4, 0.483], [1, 10])  # due at 0.48, 3 ms late
    assert trace.playback(0.4).gaps == 0


def test_level_summary_reports_safe_start_and_stalls_at_the_play_buffer() -> None:
    traces = [_gappy(), _trace([0.3, 0.35, 1.0], [1, 10, 10])]
    summary = summarize_streams(traces, wall_s=2.0, play_buffer_ms=250)
    assert summary["safe_start_p50_s"] == pytest.approx((1.22 + 0.3) / 2)
    assert summary["safe_start_p95_s"] == pytest.approx(0.3 + 0.95 * 0.92)
    assert summary["play_buffer_ms"] == 250
    assert summary["stalled_streams"] == 1
    assert summary["stall_s_p95"] == pytest.approx(0.95 * 0.57, abs=1e-3)


def test_a_longer_play_buffer_hides_the_gap() -> None:
    summary = summarize_streams([_gappy()], wall_s=2.0, play_buffer_ms=900)  # starts at 1.3
    assert summary["stalled_streams"] == 0
    assert summary["stall_s_p95"] == 0.0
