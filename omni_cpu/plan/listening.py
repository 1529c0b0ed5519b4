"""What a listener hears, predicted: each stream's chunks on a timeline, the chunk schedule
that keeps a player fed, and the streams a replica carries without a gap.

Pure, on the cost model of omni_cpu.plan.speed. A stream's frames leave the talker
one step apart after its prompt's prefill, the step taken at its p95 (the model's step
times costs.TALKER_STEP_SPREAD), so the schedule and the safe start hold through a
host's slow steps; code2wav takes each chunk once its last frame is out and its cores
are free, one chunk at a time, in the order they are ready. A player that starts at
`s` plays a chunk at `s` + the audio before it, so the stream's *safe start* (the
earliest start with no gap) is the largest "arrival - audio offset" over its chunks
(omni_cpu.speech.playback measures the same thing on real streams).

The schedule (vLLM-Omni's `codec_chunk_ramp`, then `codec_chunk_frames` chunks):
after a 1-frame first chunk, each next chunk is the largest that still arrives
before the player needs it, so small chunks while the buffer is thin, then the
steady size once the stream is far enough ahead. Larger chunks cost code2wav less
per frame (its per-call cost), which is what carries more streams.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from omni_cpu.plan import costs
from omni_cpu.plan.speed import (
    SHARED,
    SpeedInputs,
    StageCores,
    code2wav_chunk_ms,
    frame_ms,
    streams_prefill_ms,
    talker_step_ms,
)

# The request length safe start and capacity are stated for: a 10 s sentence (124
# frames); gaps grow with length when a stream is slower than real time.
REFERENCE_FRAMES = 124
# `bench --find-capacity` and the planner call streams stall-free while their p95 safe
# start stays within this many seconds of submission.
SAFE_START_LIMIT_S = 1.0
# A schedule keeps each chunk within this much of first audio: a player that starts
# at first audio + this never goes silent.
SAFE_START_MARGIN_MS = 50.0
# The most chunks a ramp lists before the steady size.
MAX_RAMP_CHUNKS = 16
# The first chunk sizes the schedule tries, from 1 frame up: past a few frames first
# audio waits longer than any gap it could save.
MAX_FIRST_CHUNK_FRAMES = 6
# Safe starts within this fraction of the earliest count as equal when choosing a
# schedule (then the earliest first audio wins): a slow stream's player waits seconds
# either way, and should hear something soon.
SAFE_START_TOLERANCE = 0.05


@dataclass(frozen=True)
class Schedule:
    """Chunk sizes in frames: `ramp` first (one entry per chunk), then `steady` each."""

    ramp: tuple[int, ...]
    steady: int

    @property
    def connector_ramp(self) -> tuple[int, ...]:
        """vLLM-Omni's codec_chunk_ramp: () where a first chunk then steady ones say the same."""
        return self.ramp if len(self.ramp) > 2 else ()

    @property
    def first(self) -> int:
        """The first chunk's frames: what first audio waits for."""
        return self.ramp[0] if self.ramp else self.steady

    def sizes(self, frames: int) -> list[int]:
        """The chunks a request of `frames` frames is sent in (the last one ragged)."""
        sizes: list[int] = []
        left = frames
        index = 0
        while left > 0:
            size = self.ramp[index] if index < len(self.ramp) else self.steady
            sizes.append(min(size, left))
            left -= size
            index += 1
        return sizes


@dataclass(frozen=True)
class Timeline:
    """One stream's chunks: when each arrives (ms since submission) and its audio offset."""

    arrivals_ms: tuple[float, ...]
    offsets_ms: tuple[float, ...]

    @property
    def first_audio_ms(self) -> float:
        return self.arrivals_ms[0]

    @property
    def safe_start_ms(self) -> float:
        return max(a - o for a, o in zip(self.arrivals_ms, self.offsets_ms, strict=True))


def _median_step_ms(cores: StageCores, speed: SpeedInputs, streams: int, chunk: int) -> float:
    """The time between a stream's frames leaving the talker with `streams` running.

    Sharing cores, code2wav's work comes out of the same cores, in turn: the
    interval of omni_cpu.plan.speed.frame_ms, which counts both.
    """
    if cores.talker == SHARED:
        return frame_ms(SHARED, cores.compute, chunk, speed, streams)
    return talker_step_ms(cores.talker_cores, speed, streams)


def _step_ms(cores: StageCores, speed: SpeedInputs, streams: int, chunk: int) -> float:
    """The same at its p95 (the median times costs.TALKER_STEP_SPREAD)."""
    return _median_step_ms(cores, speed, streams, chunk) * costs.TALKER_STEP_SPREAD


def frames_out_ms(step_ms: float, frames: int) -> float:
    """When a stream's first `frames` frames are out of the talker, at the p95: what the
    schedule and the safe start are planned on, so a player is fed through slow steps.

    `frames` median steps, and the spread of their sum: one step's p95 is
    costs.TALKER_STEP_SPREAD times its median, and a sum of steps that vary independently
    spreads by the square root of their count. So a first chunk of a few frames is planned
    near each step's own p95, while a request's whole length is not charged every step at
    its p95 (at two streams on the 2-core Zen 4 that made a 0.97-1.02 s safe start 1.87 s:
    benchmarks/calibrated.json `misses`)."""
    return frames * step_ms + (costs.TALKER_STEP_SPREAD - 1) * step_ms * math.sqrt(frames)


def simulate(
    cores: StageCores, speed: SpeedInputs, schedule: Schedule, streams: int, frames: int
) -> list[Timeline]:
    """Every stream's timeline when `streams` requests of `frames` frames start together."""
    step = _median_step_ms(cores, speed, streams, schedule.steady)
    start = streams_prefill_ms(cores, speed, streams)
    sizes = schedule.sizes(frames)
    # (ready ms, stream, chunk index, offset ms, frames): each chunk once its last frame is out.
    chunks = []
    for stream in range(streams):
        done = 0
        for index, size in enumerate(sizes):
            done += size
            offset = (done - size) * costs.FRAME_AUDIO_MS
            chunks.append((start + frames_out_ms(step, done), stream, index, offset, size))
    chunks.sort()
    # Chunks of as many frames ready at once (the streams' same chunk) are decoded in one
    # call, as code2wav batches them (omni_cpu.models.code2wav.decode_together): their
    # frames' cost each, the call's and the engine step's once.
    batches: dict[tuple[float, int], list[tuple[int, float]]] = {}
    for ready, stream, _, offset, size in chunks:
        batches.setdefault((ready, size), []).append((stream, offset))
    free = 0.0
    arrivals: dict[int, list[tuple[float, float]]] = {s: [] for s in range(streams)}
    for (ready, size), members in batches.items():
        decode = code2wav_chunk_ms(size * len(members), cores.code2wav_cores, speed)
        free = max(free, ready) + decode * cores.turns
        for stream, offset in members:
            arrivals[stream].append((free, offset))
    return [
        Timeline(tuple(a for a, _ in arrivals[s]), tuple(o for _, o in arrivals[s]))
        for s in range(streams)
    ]


def safe_start_p95_s(
    cores: StageCores, speed: SpeedInputs, schedule: Schedule, streams: int, frames: int
) -> float:
    """The 95th percentile of the streams' safe starts (as `bench` reports it), seconds."""
    starts = sorted(t.safe_start_ms for t in simulate(cores, speed, schedule, streams, frames))
    rank = (len(starts) - 1) * 0.95
    low = int(rank)
    high = min(low + 1, len(starts) - 1)
    return (starts[low] + (starts[high] - starts[low]) * (rank - low)) / 1000


def _ramp_from(cores: StageCores, speed: SpeedInputs, steady: int, first: int) -> Schedule:
    """A `first`-frame chunk, then each chunk the largest (up to `steady`) that arrives
    within SAFE_START_MARGIN_MS of the first chunk's lateness; where none does, `steady`."""
    step = _median_step_ms(cores, speed, 1, steady)
    start = streams_prefill_ms(cores, speed, 1)

    def decode_ms(size: int) -> float:
        return code2wav_chunk_ms(size, cores.code2wav_cores, speed) * cores.turns

    first_audio = start + frames_out_ms(step, first) + decode_ms(first)
    allowed = first_audio + SAFE_START_MARGIN_MS
    ramp = [first]
    done, free = first, first_audio
    while len(ramp) < MAX_RAMP_CHUNKS and ramp[-1] < steady:
        offset = done * costs.FRAME_AUDIO_MS
        fits = [
            size
            for size in range(1, steady + 1)
            if max(free, start + frames_out_ms(step, done + size)) + decode_ms(size) - offset
            <= allowed
        ]
        size = max(fits) if fits else steady
        size = max(size, ramp[-1]) if len(ramp) > 1 else size  # never shrink mid-ramp
        free = max(free, start + frames_out_ms(step, done + size)) + decode_ms(size)
        done += size
        ramp.append(size)
    if ramp[-1] != steady:
        ramp.append(steady)
    return Schedule(tuple(ramp), steady)


def choose_schedule(
    cores: StageCores,
    speed: SpeedInputs,
    steady: int,
    first: int = costs.INITIAL_CODEC_CHUNK_FRAMES,
) -> Schedule:
    """The chunk schedule of the earliest safe start for one 10 s stream, then `steady` chunks.

    Tried: a first chunk of `first` frames and up (to MAX_FIRST_CHUNK_FRAMES), each followed
    by the ramp that keeps its player fed (`_ramp_from`), and each followed at once by
    steady chunks. A larger first chunk delays first audio but gives code2wav's per-call
    cost more audio to hide behind; the earliest safe start wins (within
    SAFE_START_TOLERANCE or SAFE_START_MARGIN_MS), then the earliest first audio, then
    the fewest chunks. No ramp when the first chunk is the steady size.
    """
    if first >= steady:
        return Schedule((), steady)
    candidates: list[Schedule] = []
    for size in range(first, min(steady, first + MAX_FIRST_CHUNK_FRAMES)):
        candidates += [_ramp_from(cores, speed, steady, size), Schedule((size, steady), steady)]

    timelines = {c: simulate(cores, speed, c, 1, REFERENCE_FRAMES)[0] for c in candidates}
    best = min(t.safe_start_ms for t in timelines.values())
    # Safe starts this close to the earliest are the same to a listener: of those, the
    # earliest first audio, then the fewest chunks.
    close = max(SAFE_START_MARGIN_MS, SAFE_START_TOLERANCE * best)
    return min(
        (c for c, t in timelines.items() if t.safe_start_ms <= best + close),
        key=lambda c: (timelines[c].first_audio_ms, len(c.ramp)),
    )


def stall_free_streams(
    cores: StageCores,
    speed: SpeedInputs,
    schedule: Schedule,
    max_seqs: int,
    limit_s: float = SAFE_START_LIMIT_S,
    frames: int = REFERENCE_FRAMES,
) -> int:
    """The most streams (<= max_seqs) started together whose p95 safe start is <= limit_s."""
    streams = 0
    while streams < max_seqs and (
        safe_start_p95_s(cores, speed, schedule, streams + 1, frames) <= limit_s
    ):
        streams += 1
    return streams


def describe_schedule(cores: StageCores, speed: SpeedInputs, schedule: Schedule) -> str:
    """The profile's note: the chunks, and whether a player fed by them starts at first audio."""
    timeline = simulate(cores, speed, schedule, 1, REFERENCE_FRAMES)[0]
    step = _median_step_ms(cores, speed, 1, schedule.steady)
    slow = _step_ms(cores, speed, 1, schedule.steady)
    first, safe = timeline.first_audio_ms / 1000, timeline.safe_start_ms / 1000
    sizes = ", ".join(str(size) for size in schedule.ramp[:-1]) or str(schedule.steady)
    chunks = f"chunks of {sizes} frame(s), then {schedule.steady} each"
    pace = (
        f"one stream makes a frame every {step:.0f} ms ({slow:.0f} ms at p95, as planned) "
        "against the 80 ms it plays"
    )
    if safe - first <= SAFE_START_MARGIN_MS / 1000 + 1e-9:
        return (
            f"{chunks}: {pace}, so each chunk arrives before it is due (predicted at the "
            f"p95 step: first audio {first:.2f} s, safe start {safe:.2f} s for a 10 s sentence)"
        )
    return (
        f"{chunks}: {pace} and code2wav cannot get ahead of the player, so a 10 s sentence "
        f"needs {safe - first:.2f} s of buffer past first audio to play without a gap "
        f"(predicted at the p95 step: first audio {first:.2f} s, safe start {safe:.2f} s)"
    )
