"""`omni-cpu tune`: a bounded grid around the planner's choices, each point benchmarked.

Each point is planned by the planner itself with some choices fixed through
PlanOptions (talker/code2wav core split, codec chunk size, max_num_seqs, dtype),
so every variant's memory, KV bytes and notes follow the same rules as `auto`.
Points that change one choice come first, so a small --max-points still probes
every choice.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from omni_cpu.hardware.facts import Facts
from omni_cpu.launch.plan import LaunchPlan
from omni_cpu.plan import costs
from omni_cpu.plan.footprint import ModelFootprint
from omni_cpu.plan.policy import PlanOptions, plan_profile
from omni_cpu.plan.speed import SHARED
from omni_cpu.profile import Profile, deploy_config_dict
from omni_cpu.speech.request import SpeechRequest

THROUGHPUT_STREAMS = 4
TOLERANCE = 0.10


@dataclass(frozen=True)
class GridPoint:
    """One combination of the planner's choices."""

    talker_cores: int  # SHARED: both stages share every compute core
    chunk_frames: int
    max_num_seqs: int
    dtype: str

    def label(self) -> str:
        split = "shared" if self.talker_cores == SHARED else f"talker {self.talker_cores}"
        return f"{split} · chunk {self.chunk_frames} · seqs {self.max_num_seqs} · {self.dtype}"


def _compute_cpus(profile: Profile) -> tuple[int, ...]:
    return tuple(sorted(frozenset().union(*(stage.cpu_ids() for stage in profile.stages))))


def auto_point(profile: Profile) -> GridPoint:
    """The point the planner chose."""
    talker, code2wav = profile.replicas[0].talker, profile.replicas[0].code2wav
    shared = talker.cpus == code2wav.cpus
    return GridPoint(
        SHARED if shared else len(talker.cpu_ids()),
        profile.streaming.codec_chunk_frames,
        talker.max_num_seqs,
        talker.dtype,
    )


def grid_points(profile: Profile, dtypes: tuple[str, ...], max_points: int) -> list[GridPoint]:
    """The auto point, then single-choice changes, then combinations; at most `max_points`."""
    auto = auto_point(profile)
    cores = len(_compute_cpus(profile))
    splits = [SHARED, *range(1, cores)] if cores >= 2 else [SHARED]
    # Beyond the neighbours of the auto split, more split points add little per engine start.
    if auto.talker_cores != SHARED:
        near = {auto.talker_cores - 1, auto.talker_cores, auto.talker_cores + 1}
        splits = [s for s in splits if s == SHARED or s in near]
    choices = {
        "talker_cores": splits,
        "chunk_frames": sorted({*costs.CODEC_CHUNK_FRAMES_CHOICES[:2], auto.chunk_frames}),
        "max_num_seqs": sorted({THROUGHPUT_STREAMS, auto.max_num_seqs}),
        "dtype": list(dict.fromkeys((auto.dtype, *dtypes))),
    }
    points = [GridPoint(*combo) for combo in itertools.product(*choices.values())]

    def changes(point: GridPoint) -> int:
        return sum(getattr(point, name) != getattr(auto, name) for name in choices)

    # Fewest changes from auto first (auto itself, then one choice at a time).
    return sorted(points, key=changes)[:max_points]


def variant_options(options: PlanOptions, point: GridPoint) -> PlanOptions:
    """The planning inputs of a point: the base options with the point's choices fixed."""
    return dataclasses.replace(
        options,
        stages=1 if point.talker_cores == SHARED else 2,
        talker_cores=point.talker_cores,
        chunk_frames=point.chunk_frames,
        max_seqs=point.max_num_seqs,
        dtype=point.dtype,
        code2wav_dtype=None,
    )


def variant_profile(
    facts: Facts, footprint: ModelFootprint, options: PlanOptions, point: GridPoint
) -> Profile:
    """The profile the planner makes with the point's choices fixed (replica 0 is run)."""
    profile = plan_profile(facts, footprint, variant_options(options, point))
    return dataclasses.replace(
        profile, notes=(*profile.notes, f"omni-cpu tune point: {point.label()}")
    )


def launch_plan_for(model: str, profile: Profile, source: str) -> LaunchPlan:
    """A launch plan for a profile that exists only in memory (replica 0)."""
    return LaunchPlan(model, profile, source, 0, deploy_config_dict(profile, 0), ())


def measure_point(
    model: str, profile: Profile, make_requests: Callable[[int], list[SpeechRequest]]
) -> dict[str, Any]:
    """One engine start: single-stream RTF, then 4-stream audio-seconds per wall-second."""
    from omni_cpu.bench.session import EngineSession
    from omni_cpu.bench.stats import summarize_streams

    with EngineSession(launch_plan_for(model, profile, "tune")) as session:
        session.stream_batch(make_requests(1))  # warm-up
        single = summarize_streams(*session.stream_batch(make_requests(1)))
        multi = summarize_streams(*session.stream_batch(make_requests(THROUGHPUT_STREAMS)))
        load_s = session.load_s
    return {
        "rtf_1": single["rtf_p50"],
        "ttfa_1_s": single["ttfa_p50_s"],
        "throughput_4": multi["audio_s_per_wall_s"],
        "load_s": round(load_s, 1),
    }


def verdict(rows: list[dict[str, Any]], tolerance: float = TOLERANCE) -> dict[str, Any]:
    """Best point per metric, and whether auto is within `tolerance` of it on both."""
    measured = [r for r in rows if r.get("error") is None and r.get("rtf_1") is not None]
    auto = next((r for r in measured if r["auto"]), None)
    if not measured or auto is None:
        return {"auto_within_tolerance": None, "tolerance": tolerance}
    best_rtf = min(measured, key=lambda r: r["rtf_1"])
    with_tp = [r for r in measured if r.get("throughput_4")]
    best_tp = max(with_tp, key=lambda r: r["throughput_4"]) if with_tp else None
    rtf_ok = auto["rtf_1"] <= best_rtf["rtf_1"] * (1 + tolerance)
    tp_ok = best_tp is None or (
        auto.get("throughput_4") is not None
        and auto["throughput_4"] >= best_tp["throughput_4"] * (1 - tolerance)
    )
    return {
        "tolerance": tolerance,
        "best_rtf_1": best_rtf["point"],
        "best_throughput_4": None if best_tp is None else best_tp["point"],
        "auto_rtf_1_ok": rtf_ok,
        "auto_throughput_4_ok": tp_ok,
        "auto_within_tolerance": rtf_ok and tp_ok,
    }


def best_point(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The point to write as best.yaml: highest 4-stream throughput among those whose
    single-stream RTF is within the tolerance of the best RTF (single stream first)."""
    measured = [r for r in rows if r.get("error") is None and r.get("rtf_1") is not None]
    if not measured:
        return None
    floor = min(r["rtf_1"] for r in measured) * (1 + TOLERANCE)
    fast = [r for r in measured if r["rtf_1"] <= floor]
    return max(fast, key=lambda r: r.get("throughput_4") or 0.0)
