"""`omni-cpu bench`: the triad, then one engine start, then each concurrency level in turn."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omni_cpu import envs
from omni_cpu.bench import procstats
from omni_cpu.bench.bandwidth import Triad, stage_read, triad_bandwidth, weight_streaming
from omni_cpu.bench.capacity_search import search_capacity
from omni_cpu.bench.session import EngineSession
from omni_cpu.bench.stats import summarize_streams
from omni_cpu.checkpoint.geometry import FRAME_SAMPLES
from omni_cpu.cpulist import parse_cpu_list
from omni_cpu.errors import InputError
from omni_cpu.launch.plan import LaunchPlan
from omni_cpu.launch.results import startup_dict
from omni_cpu.plan import capacity
from omni_cpu.plan.footprint import ModelFootprint
from omni_cpu.plan.speed import SpeedInputs
from omni_cpu.platform import steplog
from omni_cpu.process import procfs
from omni_cpu.process.stage_processes import stage_binds
from omni_cpu.profile import choices
from omni_cpu.speech.playback import PLAY_BUFFER_MS, StreamTrace
from omni_cpu.speech.request import SpeechRequest

QUERY_TYPES = ("CustomVoice", "VoiceDesign", "Base")

# How each reported number is obtained (printed under the table and put in --json).
DERIVATIONS = {
    "ttfa": "submission of the batch to the request's first audio chunk at the driver",
    "rtf": "per request: submission to its last chunk / its audio seconds",
    "audio_s_per_wall_s": "all audio of the level / the level's wall time "
    "(its batches back to back)",
    "talker_ms_per_frame": "median over requests of (last - first chunk arrival) / frames after "
    "the first chunk: the talker's time per frame while code2wav keeps up",
    "talker_step_ms": "median wall time of one talker decode step inside the worker "
    "(OMNI_CPU_STEP_LOG): one frame for every running stream, code predictor included",
    "talker_step_ms_p95": "95th percentile of the same steps; over talker_step_ms at one stream "
    "it is the step's spread, which the plan's chunk schedule and predicted safe start are "
    "planned on (TALKER_STEP_SPREAD in omni_cpu/plan/costs.py)",
    "code_predictor_ms": "median wall time of the code predictor's 15 steps within one talker step",
    "code2wav_ms_per_frame": "code2wav's busy wall time inside the worker (its steps with codes "
    "to decode, OMNI_CPU_STEP_LOG) / frames of the level; without the step log, its CPU time "
    "from /proc / frames / cores, an upper bound since idle vLLM workers spin",
    "busy_fraction": "stage CPU seconds / (level wall seconds x stage cores); near 1 means "
    "spinning or fully busy, so CPU time cannot separate work from waiting",
    "peak_rss_bytes": "sum of VmHWM of each stage's processes (each its own peak since start)",
    "predicted_rtf": "the cost model (omni_cpu.plan.capacity) for this profile, level and "
    "request length: first audio + the other frames at the level's frame interval + the last "
    "chunk's decode, over the audio; compare with rtf_p50",
    "predicted_ttfa_s": "the cost model's first audio at the level: the prompts' prefill, one "
    "step, the first chunk's decode; compare with ttfa_p50_s",
    "safe_start": "per stream: the largest (chunk arrival - audio before the chunk), i.e. the "
    "earliest moment after submission a player can start and never go silent",
    "stalled_streams": "streams with a gap for a player that starts at first audio + "
    "play_buffer_ms and waits whenever the next chunk is late by more than 5 ms; stall_s is "
    "the silence inside one stream",
}


def parse_concurrency(text: str) -> tuple[int, ...]:
    """`1,2,4,8` -> (1, 2, 4, 8): positive, distinct, in the order given."""
    levels: list[int] = []
    for item in text.split(","):
        try:
            level = int(item.strip())
        except ValueError:
            level = 0
        if level < 1:
            raise InputError(
                f"--concurrency {text!r}: {item.strip()!r} is not a positive integer",
                "give a comma-separated list like 1,2,4,8",
            )
        if level not in levels:
            levels.append(level)
    return tuple(levels)


def check_query_type(query_type: str) -> str:
    """The query type, if the bench knows how to build it."""
    for known in QUERY_TYPES:
        if query_type.lower() == known.lower():
            return known
    raise InputError(
        f"unknown --query-type {query_type!r}", f"use one of: {', '.join(QUERY_TYPES)}"
    )


@dataclass
class Level:
    """One concurrency level's results."""

    concurrency: int
    summary: dict[str, Any]
    code2wav_ms_per_frame: float | None
    busy_fraction: dict[str, float]
    stage_cpu_s: dict[str, float]
    peak_rss_bytes: dict[str, int]
    talker_step_ms: float | None = None  # the step log's p50
    talker_step_ms_p95: float | None = None
    code_predictor_ms: float | None = None
    predicted_rtf: float | None = None
    predicted_ttfa_s: float | None = None
    predicted_safe_start_s: float | None = None
    streams: list[dict[str, Any]] = field(default_factory=list)  # StreamTrace.to_dict each

    def to_dict(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency,
            **self.summary,
            "predicted_rtf": self.predicted_rtf,
            "predicted_ttfa_s": self.predicted_ttfa_s,
            "predicted_safe_start_s": self.predicted_safe_start_s,
            "talker_step_ms": self.talker_step_ms,
            "talker_step_ms_p95": self.talker_step_ms_p95,
            "code_predictor_ms": self.code_predictor_ms,
            "code2wav_ms_per_frame": self.code2wav_ms_per_frame,
            "busy_fraction": self.busy_fraction,
            "stage_cpu_s": self.stage_cpu_s,
            "peak_rss_bytes": self.peak_rss_bytes,
            "streams": self.streams,
        }

    def take_step_log(self, window: steplog.StepWindow, frames: float) -> None:
        """The stage times the workers logged over this level (`frames`: its audio frames)."""
        self.talker_step_ms = window.talker_step_ms_p50()
        self.talker_step_ms_p95 = window.talker_step_ms_p95()
        self.code_predictor_ms = window.code_predictor_ms_p50()
        busy_ms = window.code2wav_busy_ms()
        if busy_ms is not None and frames:
            self.code2wav_ms_per_frame = round(busy_ms / frames, 1)


@dataclass
class BenchResult:
    """Everything `omni-cpu bench` measured."""

    model: str
    deploy_profile: str
    query_type: str
    frames: int
    warmup: int
    stage_cpus: dict[str, str]
    triad: Triad
    talker_weight_bytes: int  # streamed per frame at batch 1, in the stage's weight format
    weights: str = "model"
    load_s: float = 0.0
    startup: dict[str, float] = field(default_factory=dict)  # launch.results.STARTUP_PHASES
    stage_startup: dict[str, dict[str, Any]] = field(default_factory=dict)  # each stage's own
    stage_start: str = ""  # "fork" or "spawn" (launch.pipeline.choose_stage_start)
    levels: list[Level] = field(default_factory=list)
    stage_read: dict[str, Any] | None = None  # bandwidth.stage_read of the talker's CPUs
    # What the predictions assume: omni_cpu.plan.capacity's source, weights, assumptions.
    prediction: dict[str, Any] = field(default_factory=dict)
    # `--find-capacity`: capacity_search.CapacitySearch.to_dict (None: fixed levels)
    capacity: dict[str, Any] | None = None

    def weight_streaming(self) -> dict[str, Any]:
        single = next((lv for lv in self.levels if lv.concurrency == 1), None)
        ms = None
        if single is not None:
            ms = single.talker_step_ms or single.summary["talker_ms_per_frame"]
        read = self.stage_read["bytes_per_s"] if self.stage_read else None
        return weight_streaming(self.talker_weight_bytes, ms, self.triad, read)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "deploy_profile": self.deploy_profile,
            "query_type": self.query_type,
            "frames": self.frames,
            "warmup": self.warmup,
            "weights": self.weights,
            "load_s": round(self.load_s, 3),
            "startup": startup_dict(self.startup, self.stage_startup),
            "stage_start": self.stage_start,
            "stage_cpus": self.stage_cpus,
            "memory_bandwidth": self.triad.to_dict(),
            "talker_read_bandwidth": self.stage_read,
            "weight_streaming": self.weight_streaming(),
            "levels": [level.to_dict() for level in self.levels],
            "prediction": self.prediction,
            "capacity": self.capacity,
            "derivations": DERIVATIONS,
        }


def stage_cpus_of(plan: LaunchPlan) -> dict[str, str]:
    """Stage name -> its CPU list, for the replica the plan runs."""
    replica = plan.profile.replicas[plan.replica]
    return {stage.name: stage.cpus for stage in replica.stages}


def _level(
    session: EngineSession,
    concurrency: int,
    requests: list[SpeechRequest],
    groups: dict[str, list[int]],
    stage_cpus: dict[str, str],
    step_dir: Path | None,
    play_buffer_ms: float = PLAY_BUFFER_MS,
) -> Level:
    window_start = time.time()
    before = procstats.group_cpu_seconds(groups)
    traces: list[StreamTrace] = []
    wall_s = 0.0
    for start in range(0, len(requests), concurrency):
        batch, batch_wall = session.stream_batch(requests[start : start + concurrency])
        traces += batch
        wall_s += batch_wall
    after = procstats.group_cpu_seconds(groups)
    cpu_s = {name: round(after[name] - before[name], 3) for name in groups}
    frames = sum(t.samples for t in traces) / FRAME_SAMPLES
    busy: dict[str, float] = {}
    code2wav_ms = None
    for name, seconds in cpu_s.items():
        cores = len(parse_cpu_list(stage_cpus[name.split("+")[0]]))
        busy[name] = round(seconds / (wall_s * cores), 3) if wall_s > 0 else 0.0
        if name == "code2wav" and frames:
            code2wav_ms = round(seconds * 1000 / frames / cores, 1)
    rss = procstats.group_peak_rss_bytes(groups)
    rss["driver"] = procfs.peak_rss_bytes(os.getpid())
    summary = summarize_streams(traces, wall_s, play_buffer_ms)
    level = Level(concurrency, summary, code2wav_ms, busy, cpu_s, rss)
    level.streams = [trace.to_dict(play_buffer_ms) for trace in traces]
    if step_dir is not None:
        time.sleep(0.2)  # the workers' last lines of the level
        level.take_step_log(steplog.read_window(step_dir, window_start, time.time()), frames)
    return level


def run_bench(
    plan: LaunchPlan,
    make_requests: Callable[[int], list[SpeechRequest]],
    levels: tuple[int, ...],
    requests_per_level: int | None,
    *,
    query_type: str,
    frames: int,
    warmup: int,
    triad_bytes: int | None = None,
    progress: Callable[[str], None] = lambda message: None,
    verbose: bool = False,
    play_buffer_ms: float = PLAY_BUFFER_MS,
    safe_start_limit_s: float | None = None,
) -> BenchResult:
    """Measure the triad, start the engines once, run warm-up then every level.

    With `safe_start_limit_s`, the levels are not `levels` but a search for the most
    streams whose p95 safe start stays within it (`bench --find-capacity`).
    """
    stage_cpus = stage_cpus_of(plan)
    speed = _speed_inputs(plan)
    result = _measure_memory(
        plan, stage_cpus, speed, query_type, frames, warmup, triad_bytes, progress
    )
    with _step_log() as step_dir:
        progress("loading the talker and code2wav engines")
        with EngineSession(plan, verbose=verbose) as session:
            result.load_s = session.load_s
            result.startup = dict(session.startup)
            result.stage_startup = dict(session.stage_startup)
            result.stage_start = session.stage_start
            groups = procstats.stage_groups(session.stage_pids, stage_binds(plan.deploy_config))
            progress(f"engines up in {sum(session.startup.values()):.1f} s")
            for index in range(warmup):
                progress(f"warm-up request {index + 1}/{warmup}")
                session.stream_batch(make_requests(1))

            def measure(concurrency: int) -> Level:
                count = requests_per_level or concurrency
                progress(f"concurrency {concurrency}: {count} request(s)")
                level = _level(
                    session,
                    concurrency,
                    make_requests(count),
                    groups,
                    stage_cpus,
                    step_dir,
                    play_buffer_ms,
                )
                # The request length that arrived (the talker may deliver one frame short).
                length = round(level.summary.get("frames_per_request_p50") or frames)
                level.predicted_rtf, level.predicted_ttfa_s = capacity.predict_request(
                    plan.profile, plan.replica, speed, concurrency, length
                )
                level.predicted_safe_start_s = capacity.predict_safe_start(
                    plan.profile, plan.replica, speed, concurrency, length
                )
                result.levels.append(level)
                return level

            if safe_start_limit_s is None:
                for concurrency in levels:
                    measure(concurrency)
            else:
                max_streams = plan.profile.replicas[plan.replica].talker.max_num_seqs
                search = search_capacity(
                    lambda n: measure(n).summary["safe_start_p95_s"],
                    safe_start_limit_s,
                    max_streams,
                )
                result.capacity = search.to_dict()
                result.levels.sort(key=lambda level: level.concurrency)
    return result


def _speed_inputs(plan: LaunchPlan):
    """The cost model's inputs for the replica as its stages run it (each level's prediction)."""
    from omni_cpu.plan.footprint import footprint_for_model

    talker, code2wav = (plan.profile.replicas[plan.replica].stage(i) for i in (0, 1))
    # What the stages run with: their entries', or this environment's override.
    return capacity.profile_speed_inputs(
        plan.profile,
        plan.replica,
        footprint_for_model(plan.model),
        choices.resolve(envs.CODE2WAV, code2wav.choices),
        choices.resolve(envs.WEIGHTS, talker.choices),
    )


def _measure_memory(
    plan: LaunchPlan,
    stage_cpus: dict[str, str],
    speed: SpeedInputs,
    query_type: str,
    frames: int,
    warmup: int,
    triad_bytes: int | None,
    progress: Callable[[str], None],
) -> BenchResult:
    """The result before any engine starts: the machine's triad, the talker cores' read
    bandwidth, and what the profile predicts."""
    weight_bytes = speed.footprint.streamed_bytes_per_frame(speed.talker_dtype, speed.weights)
    progress("measuring memory bandwidth (triad) before the engines start")
    triad = triad_bandwidth(triad_bytes) if triad_bytes else triad_bandwidth()
    progress("measuring the read bandwidth of the talker's own cores")
    talker_read = stage_read(parse_cpu_list(stage_cpus["talker"]))
    # The triad's arrays are freed before the engines start; without this the driver's
    # peak would report them instead of what serving costs.
    procfs.reset_peak_rss()
    return BenchResult(
        plan.model,
        plan.profile_source,
        query_type,
        frames,
        warmup,
        stage_cpus,
        triad,
        weight_bytes,
        speed.weights,
        stage_read=talker_read,
        prediction={
            **capacity.prediction_dict(plan.profile, plan.replica, speed),
            **predicted_for(speed.footprint),
        },
    )


def predicted_for(footprint: ModelFootprint) -> dict[str, Any]:
    """Which model the predictions are for: a published size, whose step overhead and
    code2wav cost the cost model's constants were measured on, or another (a tiny test
    checkpoint) that they only pace as a published size would run."""
    from omni_cpu.export.served_model import published_size

    size = published_size(footprint)
    return {"for_model": size.upper() if size else footprint.name, "measured_size": bool(size)}


@contextlib.contextmanager
def _step_log() -> Iterator[Path]:
    """The folder stage workers log each step's wall time in (read per level).

    Stage workers inherit it through the environment. A folder made here is bench's
    own and goes when the run ends; one the user named stays.
    """
    own = not envs.OMNI_CPU_STEP_LOG
    if own:
        os.environ[envs.STEP_LOG.name] = tempfile.mkdtemp(prefix=steplog.STEP_DIR_PREFIX)
    folder = Path(envs.OMNI_CPU_STEP_LOG)
    try:
        yield folder
    finally:
        if own:
            os.environ.pop(envs.STEP_LOG.name, None)
            shutil.rmtree(folder, ignore_errors=True)
