"""What each weight format gives on a machine: the plan's predicted capacity per `--weights`.

Pure: the planner (omni_cpu.plan.policy) run once for every format the CPU has kernels
for (omni_cpu.weight_formats), with the same facts and options but the weights. `probe`
shows the comparison beside the chosen plan; `probe` and `serve` say `format_hint`'s line
where the chosen format plays no stream without a gap and another would.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from omni_cpu import envs, weight_formats
from omni_cpu.errors import PlanError
from omni_cpu.hardware.facts import Facts
from omni_cpu.plan import costs
from omni_cpu.plan.footprint import ModelFootprint
from omni_cpu.plan.listening import REFERENCE_FRAMES
from omni_cpu.plan.policy import PlanOptions, plan_profile
from omni_cpu.plan.speed import Calibration
from omni_cpu.profile.model import Profile


@dataclass(frozen=True)
class FormatCapacity:
    """One weight format's predicted capacity on a machine (its first replica's stream)."""

    weights: str  # the `--weights` name (omni_cpu.weight_formats)
    talker: str  # the talker's weights as the capacity block names them: the dtype, or int8
    source: str  # "built-in" or "calibrated", as the capacity block says
    rtf_one_stream: float | None = None
    safe_start_s: float | None = None  # one 10 s sentence's (REFERENCE_FRAMES)
    stall_free_streams: int | None = None  # every replica's
    realtime_streams: int | None = None  # every replica's
    refused: str = ""  # why the planner gives this format no plan here (its one line)
    chosen: bool = False

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _of(name: str, profile: Profile, chosen: bool) -> FormatCapacity:
    capacity = profile.capacity
    own = profile.replicas[0].capacity
    return FormatCapacity(
        weights=name,
        talker=capacity.weights if capacity else name,
        source=capacity.source if capacity else "",
        rtf_one_stream=own.rtf_one_stream if own else None,
        safe_start_s=own.safe_start_s if own else None,
        stall_free_streams=capacity.stall_free_streams if capacity else None,
        realtime_streams=capacity.realtime_streams if capacity else None,
        chosen=chosen,
    )


def compare_formats(
    facts: Facts, footprint: ModelFootprint, options: PlanOptions
) -> tuple[FormatCapacity, ...]:
    """Every format this CPU runs, planned as `options` say but for its weights, in
    weight_formats.FORMATS' order; `options.weights` is the chosen one."""
    chosen = envs.WEIGHTS.read(options.weights, "--weights")
    rows = []
    for name in weight_formats.runnable(facts.architecture, facts.isa):
        try:
            profile = plan_profile(facts, footprint, dataclasses.replace(options, weights=name))
        except PlanError as error:  # this format's own: too big for the memory here
            rows.append(FormatCapacity(name, name, "", refused=error.one_line(), chosen=False))
            continue
        rows.append(_of(name, profile, name == chosen))
    return tuple(rows)


def _chosen_and_better(
    rows: tuple[FormatCapacity, ...],
) -> tuple[FormatCapacity, FormatCapacity] | None:
    """The chosen format and the one that plays most streams without a gap, where the
    chosen plays none and another plays some; None otherwise."""
    chosen = next((row for row in rows if row.chosen), None)
    if chosen is None or chosen.stall_free_streams != 0:
        return None
    better = [row for row in rows if not row.chosen and (row.stall_free_streams or 0) > 0]
    if not better:
        return None
    best = min(better, key=lambda r: (-(r.stall_free_streams or 0), r.safe_start_s or 0.0))
    return chosen, best


def format_headline(rows: tuple[FormatCapacity, ...]) -> str | None:
    """What matters first, in one short line after the plan: the chosen format cannot keep
    real time here and another can, with both figures and the flag; None otherwise."""
    pair = _chosen_and_better(rows)
    if pair is None:
        return None
    chosen, best = pair
    name = chosen.talker if chosen.weights == weight_formats.MODEL.name else chosen.weights
    rtf, safe_start = chosen.rtf_one_stream, chosen.safe_start_s
    if rtf is not None and rtf > 1:
        why = f"cannot keep up here (RTF {rtf:.2f})"
    else:  # keeps up once started, but only after a longer wait than a listener gives
        why = "plays no stream without a gap here" + (
            f" (safe start {safe_start:.1f} s)" if safe_start is not None else ""
        )
    start = f" from {best.safe_start_s:.2f} s" if best.safe_start_s is not None else ""
    return f"{name} {why}; --weights {best.weights} plays{start}"


def format_hint(rows: tuple[FormatCapacity, ...]) -> str | None:
    """One line where the chosen format plays no stream without a gap and another would:
    which, what it gives, and that a quantized format is checked on the checkpoint first."""
    pair = _chosen_and_better(rows)
    if pair is None:
        return None
    chosen, best = pair
    seconds = REFERENCE_FRAMES * costs.FRAME_AUDIO_MS / 1000
    where = (
        f"predicted safe start {chosen.safe_start_s:.1f} s for a {seconds:.0f} s sentence"
        if chosen.safe_start_s is not None
        else "predicted"
    )
    streams = best.stall_free_streams
    gives = f"{streams} stream{'s' if streams != 1 else ''} without one (safe start "
    gives += f"{best.safe_start_s:.2f} s, RTF {best.rtf_one_stream:.2f})"
    line = (
        f"--weights {chosen.weights} plays no stream without a gap here ({where}); "
        f"--weights {best.weights} would play {gives}"
    )
    if weight_formats.get(best.weights).quantized:
        line += (
            f": check how far {best.weights} moves your checkpoint's audio first, with "
            f"omni-cpu check-weights --model DIR --weights {best.weights}"
        )
    return line


def profile_options(profile: Profile) -> PlanOptions:
    """The planning options a (loaded) profile was made with, as far as it states them:
    its dtypes, its talker's weights and the calibration its machine block keeps."""
    calibration = profile.machine.calibration
    replica = profile.replicas[0]
    return PlanOptions(
        dtype=replica.talker.dtype,
        code2wav_dtype=replica.code2wav.dtype,
        weights=replica.talker.choice(envs.WEIGHTS),
        calibration=None if calibration is None else Calibration.from_dict(calibration),
    )
