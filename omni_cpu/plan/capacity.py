"""What a plan can carry: streams in real time, one stream's RTF and first audio.

Pure, on the cost model of omni_cpu.plan.speed. A stream is real time while its
frames (80 ms of audio each) come at least every 80 ms; with b streams running, a
frame comes every `frame_ms(..., streams=b)`: the talker's step for all b, or
code2wav's b frames, whichever is slower (both in turn where they share cores).
First audio is the prompt's prefill, one step, and code2wav's first 1-frame chunk.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from omni_cpu import envs
from omni_cpu.plan import costs
from omni_cpu.plan.footprint import ModelFootprint
from omni_cpu.plan.listening import (
    REFERENCE_FRAMES,
    Schedule,
    safe_start_p95_s,
    stall_free_streams,
)
from omni_cpu.plan.speed import (
    SHARED,
    Calibration,
    SpeedInputs,
    StageCores,
    code2wav_chunk_ms,
    code2wav_costs,
    code2wav_ms,
    frame_ms,
    streams_prefill_ms,
    talker_bandwidth_gb_s,
    talker_overhead_ms,
    talker_step_ms,
)
from omni_cpu.profile.model import Capacity, Profile, Replica, ReplicaCapacity

CALIBRATED = "calibrated"
BUILT_IN = "built-in"


def stage_cores(replica: Replica) -> StageCores:
    """The split a replica's CPU lists make: shared when both stages list the same CPUs."""
    talker = replica.talker.cpu_ids()
    code2wav = replica.code2wav.cpu_ids()
    if talker == code2wav:
        return StageCores(SHARED, len(talker))
    return StageCores(len(talker), len(talker | code2wav))


def interval_ms(cores: StageCores, chunk: int, speed: SpeedInputs, streams: int) -> float:
    """ms between a stream's frames with `streams` streams running."""
    return frame_ms(cores.talker, cores.compute, chunk, speed, streams)


def _chunk_ms(frames: int, cores: StageCores, speed: SpeedInputs) -> float:
    return code2wav_chunk_ms(frames, cores.code2wav_cores, speed)


def ttfa_ms(cores: StageCores, speed: SpeedInputs, streams: int = 1, first_chunk: int = 1) -> float:
    """Submission to first audio: prefill of every stream's prompt, the first chunk's steps
    and its decode.

    Streams that start together share the prefill step; their first chunks decode in
    turn, so the middle stream waits for half of them.
    """
    first = talker_step_ms(cores.talker_cores, speed, streams) * first_chunk
    decode = _chunk_ms(first_chunk, cores, speed) * (streams + 1) / 2
    return streams_prefill_ms(cores, speed, streams) + (first + decode) * cores.turns


def request_rtf(
    cores: StageCores,
    chunk: int,
    speed: SpeedInputs,
    streams: int,
    frames: int,
    first_chunk: int = 1,
) -> float:
    """One request's wall time over its audio: first audio, its other frames, the last chunk.

    What `bench` measures per request: submission to the last chunk / audio seconds.
    """
    frames = max(frames, 1)
    rest = max(frames - first_chunk, 0)
    last = rest % chunk or min(chunk, rest)
    tail = _chunk_ms(last, cores, speed) * (streams + 1) / 2 * cores.turns if last else 0.0
    wall = ttfa_ms(cores, speed, streams, first_chunk)
    wall += (frames - 1) * interval_ms(cores, chunk, speed, streams) + tail
    return wall / (frames * costs.FRAME_AUDIO_MS)


def realtime_streams(
    cores: StageCores, chunk: int, speed: SpeedInputs, max_seqs: int
) -> tuple[int, str]:
    """The most concurrent streams that stay real time (<= max_seqs), and what stops more."""
    limit = costs.FRAME_AUDIO_MS
    streams = 0
    while streams < max_seqs and interval_ms(cores, chunk, speed, streams + 1) <= limit:
        streams += 1
    if streams == max_seqs:
        return streams, f"max_num_seqs {max_seqs}: more streams queue in this replica"
    over = streams + 1
    step = talker_step_ms(cores.talker_cores, speed, over)
    decode = over * code2wav_ms(cores.code2wav_cores, chunk, speed)
    who = (
        f"both stages in turn on {cores.compute} shared core(s) take "
        f"{interval_ms(cores, chunk, speed, over):.0f} ms"
        if cores.talker == SHARED
        else (
            f"the talker's step takes {step:.0f} ms on {cores.talker_cores} core(s)"
            if step >= decode
            else f"code2wav takes {decode:.0f} ms on {cores.code2wav_cores} core(s)"
        )
    )
    what = "one stream" if over == 1 else f"{over} streams"
    return streams, f"{what}: {who} per frame, over the {limit:.0f} ms it plays"


def replica_capacity(replica: Replica, schedule: Schedule, speed: SpeedInputs) -> ReplicaCapacity:
    """The capacity of one planned replica, streaming in `schedule`'s chunks."""
    cores = stage_cores(replica)
    chunk, first_chunk = schedule.steady, schedule.first
    max_seqs = replica.talker.max_num_seqs
    streams, why = realtime_streams(cores, chunk, speed, max_seqs)
    return ReplicaCapacity(
        source=source_of(speed),
        weights=speed.weight_format,
        rtf_one_stream=round(interval_ms(cores, chunk, speed, 1) / costs.FRAME_AUDIO_MS, 3),
        ttfa_s=round(ttfa_ms(cores, speed, 1, first_chunk) / 1000, 3),
        realtime_streams=streams,
        talker_step_ms=round(talker_step_ms(cores.talker_cores, speed), 1),
        talker_step_ms_at_max_seqs=round(talker_step_ms(cores.talker_cores, speed, max_seqs), 1),
        max_num_seqs=max_seqs,
        code2wav_ms_per_frame=round(code2wav_ms(cores.code2wav_cores, chunk, speed), 1),
        limit=why,
        safe_start_s=round(safe_start_p95_s(cores, speed, schedule, 1, REFERENCE_FRAMES), 3),
        stall_free_streams=stall_free_streams(cores, speed, schedule, max_seqs),
    )


def source_of(speed: SpeedInputs) -> str:
    return CALIBRATED if speed.calibration is not None else BUILT_IN


def machine_capacity(
    replicas: Iterable[Replica], speed: SpeedInputs, talker_cores: int = 1
) -> Capacity:
    """The machine's streams (every replica's) with the assumptions behind them."""
    replicas = tuple(replicas)
    total = sum(r.capacity.realtime_streams for r in replicas if r.capacity is not None)
    stall_free = sum(r.capacity.stall_free_streams or 0 for r in replicas if r.capacity)
    return Capacity(
        realtime_streams=total,
        stall_free_streams=stall_free,
        source=source_of(speed),
        weights=speed.weight_format,
        assumptions=assumptions(speed, talker_cores),
    )


def class_line(speed: SpeedInputs) -> str:
    """The class the built-in speeds are read for, and how sure they are, in one line."""
    own = speed.class_speed
    name = speed.cpu_class or "unknown"
    line = f"CPU class {name}: talker {speed.talker_dtype}, code2wav {speed.code2wav_dtype}"
    if (slowest := costs.slowest_known(speed.cpu_class)) is not None:
        told = ", ".join(costs.known_in(speed.cpu_class))
        line += (
            f"; this CPU is none measured in its ISA class ({told}): planned on the "
            f"slowest of them, {slowest}"
        )
    elif own is not None and not own.measured:
        line += f"; UNMEASURED: built-in speeds from {own.measured_on}"
    return line


def assumptions(speed: SpeedInputs, talker_cores: int = 1) -> tuple[str, ...]:
    """What the prediction takes for given, in words a buyer can check."""
    calibration = speed.calibration
    measured = calibration.bandwidth_gb_s if calibration else {}
    if measured:
        bandwidth = "talker weights stream at the bandwidth measured here: " + ", ".join(
            f"{n} core(s) {gb:g} GB/s" for n, gb in sorted(measured.items())
        )
    else:
        own = speed.class_speed
        per_core = own.gemv_gb_s_per_core if own else costs.GEMV_GB_S_PER_CORE
        whose = own.measured_on if own else "the 2-core Intel Xeon's"
        bandwidth = (
            f"talker weights stream at {per_core:g} GB/s per core up to "
            f"{costs.NODE_READ_GB_S:g} GB/s per node (built-in, uncalibrated: {whose}; "
            f"{talker_bandwidth_gb_s(talker_cores, speed):g} GB/s on the first "
            "replica's talker cores)"
        )
    streamed = speed.footprint.streamed_bytes_per_frame(speed.talker_dtype, speed.weights)
    overhead = (
        f"{talker_overhead_ms(speed, talker_cores):.0f} ms per talker step on "
        f"{talker_cores} core(s) besides its "
        f"{streamed / 1e9:.2f} GB of {speed.weight_format} weights per frame"
    )
    if calibration is not None and calibration.small_op_us:
        overhead += f" (scaled by the small-op time measured here, {calibration.small_op_us} µs)"
    else:
        overhead += " (built-in)"
    per_frame, per_call = code2wav_costs(speed)
    code2wav_source = (
        "measured here"
        if calibration is not None and speed.code2wav_dtype in calibration.code2wav_ms_per_frame
        else "built-in"
    )
    return (
        bandwidth,
        overhead,
        f"{costs.TALKER_STEP_GROWTH_PER_STREAM:.0%} more step time per extra stream (built-in)",
        f"chunk schedule and safe start planned on the talker step's p95, "
        f"{costs.TALKER_STEP_SPREAD:g}x its median (built-in)",
        f"code2wav ({speed.code2wav_dtype}, {speed.code2wav_decode} decode) {per_frame:g} ms per "
        f"frame and {per_call:g} ms per call on one core ({code2wav_source}), "
        f"+{costs.CODE2WAV_STAGE_MS_PER_FRAME:g} ms per frame and "
        f"{costs.CODEC_ENGINE_CALL_MS:g} ms per chunk in its engine",
        class_line(speed),
        "real time: a stream's frames (80 ms of audio each) come at least every 80 ms; "
        "rtf_one_stream is the steady rate, first audio apart",
    )


def profile_speed_inputs(
    profile: Profile,
    replica_index: int,
    footprint: ModelFootprint,
    code2wav_decode: str | None = None,
    weights: str | None = None,
) -> SpeedInputs:
    """The cost model's inputs as a (loaded) profile states them, for one of its replicas.

    `code2wav_decode` and `weights`: what the stages run with where it is not what their
    entries say (an environment override: omni_cpu.profile.choices); None: the entries'.
    """
    replica = profile.replicas[replica_index]
    calibration = profile.machine.calibration
    return SpeedInputs(
        footprint=footprint,
        talker_dtype=replica.talker.dtype,
        code2wav_dtype=replica.code2wav.dtype,
        weights=weights or replica.talker.choice(envs.WEIGHTS),
        calibration=None if calibration is None else Calibration.from_dict(calibration),
        code2wav_decode=code2wav_decode or replica.code2wav.choice(envs.CODE2WAV),
        cpu_class=profile_class(profile),
    )


def profile_class(profile: Profile) -> str:
    """The cost model's class of the CPU a profile was planned for (costs.cpu_class)."""
    machine = profile.machine
    return costs.cpu_class(
        machine.architecture, machine.isa, machine.vendor, machine.cpu_family, machine.cpu_model
    )


def predict_request(
    profile: Profile, replica_index: int, speed: SpeedInputs, streams: int, frames: int
) -> tuple[float, float]:
    """Predicted RTF and first audio (s) of a request of `frames` frames among `streams`."""
    cores = stage_cores(profile.replicas[replica_index])
    chunk = profile.streaming.codec_chunk_frames
    first = profile.streaming.initial_codec_chunk_frames
    rtf = request_rtf(cores, chunk, speed, streams, frames, first)
    return round(rtf, 3), round(ttfa_ms(cores, speed, streams, first) / 1000, 3)


def profile_schedule(profile: Profile) -> Schedule:
    """The chunk schedule a profile sends a stream in."""
    streaming = profile.streaming
    ramp = streaming.codec_chunk_ramp or (streaming.initial_codec_chunk_frames,)
    return Schedule(tuple(ramp), streaming.codec_chunk_frames)


def predict_safe_start(
    profile: Profile, replica_index: int, speed: SpeedInputs, streams: int, frames: int
) -> float:
    """Predicted p95 safe start (s) of `streams` requests of `frames` frames started together."""
    cores = stage_cores(profile.replicas[replica_index])
    return round(safe_start_p95_s(cores, speed, profile_schedule(profile), streams, frames), 3)


def prediction_dict(profile: Profile, replica_index: int, speed: SpeedInputs) -> dict[str, Any]:
    """Where a prediction comes from, for reports beside what was measured."""
    cores = stage_cores(profile.replicas[replica_index])
    return {
        "source": source_of(speed),
        "weights": speed.weight_format,
        "code2wav_decode": speed.code2wav_decode,
        "assumptions": list(assumptions(speed, cores.talker_cores)),
    }
