"""What a listener hears, predicted: chunk timelines, the schedule, stall-free streams."""

from __future__ import annotations

import dataclasses

import pytest

from omni_cpu import weight_formats
from omni_cpu.plan import costs, footprint_for_model
from omni_cpu.plan.listening import (
    SAFE_START_MARGIN_MS,
    Schedule,
    choose_schedule,
    describe_schedule,
    safe_start_p95_s,
    simulate,
    stall_free_streams,
)
from omni_cpu.plan.speed import SpeedInputs, StageCores
from omni_cpu.profile.calibration import Calibration

FOOTPRINT = footprint_for_model("0.6b")
SPLIT = StageCores(1, 2)


def speed(step_ms: float, code2wav_ms_per_frame: float = 10.0, per_call_ms: float = 5.0):
    """A machine whose one-stream talker step is about `step_ms` (int4, one core)."""
    streamed = FOOTPRINT.streamed_bytes_per_frame("bfloat16", "int4")
    overhead = weight_formats.INT4.step_overhead_ms
    bandwidth = streamed / 1e6 / (step_ms - overhead)
    calibration = Calibration(
        bandwidth_gb_s={1: bandwidth},
        code2wav_ms_per_frame={"bfloat16": code2wav_ms_per_frame},
        code2wav_ms_per_call={"bfloat16": per_call_ms},
    )
    return SpeedInputs(FOOTPRINT, "bfloat16", "bfloat16", "int4", calibration)


def test_chunk_sizes_follow_the_ramp_then_the_steady_size_with_a_ragged_last() -> None:
    assert Schedule((1, 2, 4), 10).sizes(30) == [1, 2, 4, 10, 10, 3]
    assert Schedule((1, 10), 10).sizes(5) == [1, 4]


def test_the_timeline_has_one_arrival_per_chunk_and_audio_offsets_in_frames() -> None:
    timeline = simulate(SPLIT, speed(50), Schedule((1, 10), 10), 1, 21)[0]
    assert timeline.offsets_ms == (0.0, 80.0, 880.0)
    assert list(timeline.arrivals_ms) == sorted(timeline.arrivals_ms)
    assert timeline.safe_start_ms >= timeline.first_audio_ms


def test_a_stream_faster_than_real_time_gets_a_ramp_that_feeds_the_player_from_first_audio() -> (
    None
):
    fast = speed(50)
    schedule = choose_schedule(SPLIT, fast, 10)
    assert len(schedule.ramp) > 2 and schedule.ramp[-1] == 10
    assert list(schedule.ramp[1:]) == sorted(schedule.ramp[1:])  # it only grows
    timeline = simulate(SPLIT, fast, schedule, 1, 124)[0]
    assert timeline.safe_start_ms - timeline.first_audio_ms <= SAFE_START_MARGIN_MS + 1e-6
    # The plain schedule of the same speed leaves the player waiting for the second chunk.
    plain = simulate(SPLIT, fast, Schedule((1, 10), 10), 1, 124)[0]
    assert plain.safe_start_ms - plain.first_audio_ms > SAFE_START_MARGIN_MS


def test_a_stream_slower_than_real_time_gets_no_ramp_and_the_note_states_its_buffer() -> None:
    slow = speed(120)
    schedule = choose_schedule(SPLIT, slow, 10)
    assert schedule.ramp == (1, 10) and schedule.connector_ramp == ()
    note = describe_schedule(SPLIT, slow, schedule)
    assert "of buffer past first audio" in note and "120 ms" in note


def test_the_schedule_and_the_safe_start_are_planned_on_the_p95_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A median step of 60 ms leaves a player 20 ms of slack a frame; a slow tail eats it.
    machine = speed(60)
    monkeypatch.setattr(costs, "TALKER_STEP_SPREAD", 1.0)
    on_median = choose_schedule(SPLIT, machine, 10)
    median_start = safe_start_p95_s(SPLIT, machine, on_median, 1, 124)
    monkeypatch.setattr(costs, "TALKER_STEP_SPREAD", 1.3)
    on_p95 = choose_schedule(SPLIT, machine, 10)
    # A slower ramp (more chunks before the steady size) keeps the player fed through slow steps.
    assert on_p95 != on_median and len(on_p95.ramp) > len(on_median.ramp)
    assert safe_start_p95_s(SPLIT, machine, on_p95, 1, 124) > median_start
    # The same schedule, predicted on the slower step, promises a later safe start.
    assert safe_start_p95_s(SPLIT, machine, on_median, 1, 124) > median_start


def test_the_note_states_the_median_step_and_the_p95_it_is_planned_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(costs, "TALKER_STEP_SPREAD", 1.5)
    note = describe_schedule(SPLIT, speed(120), Schedule((1, 10), 10))
    assert "a frame every 120 ms (180 ms at p95, as planned)" in note


def test_a_fed_schedule_says_so_in_the_note() -> None:
    fast = speed(50)
    note = describe_schedule(SPLIT, fast, choose_schedule(SPLIT, fast, 10))
    assert "each chunk arrives before it is due" in note


def test_code2wav_slower_than_the_talker_makes_every_chunk_later() -> None:
    quick, slow_codec = speed(50), speed(50, code2wav_ms_per_frame=70.0)
    schedule = Schedule((1, 10), 10)
    assert (
        simulate(SPLIT, slow_codec, schedule, 1, 124)[0].safe_start_ms
        > simulate(SPLIT, quick, schedule, 1, 124)[0].safe_start_ms
    )


def test_streams_same_chunks_share_one_decode_call() -> None:
    # Two streams started together: code2wav decodes their same chunks in one call, so both
    # arrive when the batch is done (charged one after the other, the second came a whole
    # call later).
    codec = speed(50, code2wav_ms_per_frame=10.0, per_call_ms=200.0)
    schedule = Schedule((10,), 10)
    one, two = simulate(SPLIT, codec, schedule, 1, 20), simulate(SPLIT, codec, schedule, 2, 20)
    assert two[0].arrivals_ms == two[1].arrivals_ms
    assert len(one[0].arrivals_ms) == len(two[0].arrivals_ms) == 2


def test_more_streams_never_start_sooner_and_capacity_stops_at_the_limit() -> None:
    fast = speed(30)
    schedule = choose_schedule(SPLIT, fast, 10)
    last = [
        max(t.safe_start_ms for t in simulate(SPLIT, fast, schedule, n, 124)) for n in (1, 2, 4)
    ]
    assert last == sorted(last)
    streams = stall_free_streams(SPLIT, fast, schedule, max_seqs=64)
    assert 1 <= streams < 64
    assert stall_free_streams(SPLIT, fast, schedule, max_seqs=64, limit_s=0.01) == 0
    assert stall_free_streams(SPLIT, fast, schedule, max_seqs=1) == 1


def test_a_slower_talker_never_carries_more_stall_free_streams() -> None:
    counts = [
        stall_free_streams(SPLIT, s, choose_schedule(SPLIT, s, 10), max_seqs=64)
        for s in (speed(30), speed(60), speed(120))
    ]
    assert counts == sorted(counts, reverse=True)
    assert counts[-1] == 0


@pytest.mark.parametrize("steady", [1, 10, 25])
def test_the_schedule_always_ends_at_the_steady_size(steady: int) -> None:
    schedule = choose_schedule(SPLIT, speed(50), steady)
    assert schedule.steady == steady
    assert not schedule.ramp or schedule.ramp[-1] == steady
    assert dataclasses.replace(schedule).sizes(1) == [schedule.first]


def test_one_step_is_planned_at_its_p95_and_a_long_run_of_steps_nearer_its_median(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from omni_cpu.plan.listening import frames_out_ms

    monkeypatch.setattr(costs, "TALKER_STEP_SPREAD", 1.2)
    assert frames_out_ms(60.0, 1) == pytest.approx(72.0)
    # 124 steps that vary independently: their sum spreads by sqrt(124), not 124 times.
    assert frames_out_ms(60.0, 124) == pytest.approx(124 * 60.0 + 12.0 * 124**0.5)
    assert 124 * 60.0 < frames_out_ms(60.0, 124) < 124 * 72.0
