"""The cost model: a stream's time per frame for a core split, from constants or a calibration.

Pure. Without a calibration every number is a constant of omni_cpu.plan.costs,
stated with where it was measured. With one (`omni-cpu probe --calibrate`, kept in
the profile's machine block) the talker's time follows this machine's measured
weight-streaming bandwidth per core count and code2wav's its measured cost per
frame in each dtype.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omni_cpu.plan import costs
from omni_cpu.plan.footprint import ModelFootprint

SHARED = 0  # a talker core count meaning: both stages share every compute core


@dataclass(frozen=True)
class Calibration:
    """What `probe --calibrate` measured on this machine (plain numbers, JSON-ready)."""

    # Cores -> GB/s that a bandwidth-bound matrix-vector product streams weights at.
    bandwidth_gb_s: dict[int, float] = field(default_factory=dict)
    # dtype -> ms of one core per decoded code2wav frame.
    code2wav_ms_per_frame: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0  # how long the measurement took

    def to_dict(self) -> dict[str, Any]:
        return {
            "bandwidth_gb_s": {str(k): v for k, v in sorted(self.bandwidth_gb_s.items())},
            "code2wav_ms_per_frame": dict(sorted(self.code2wav_ms_per_frame.items())),
            "seconds": self.seconds,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Calibration:
        return cls(
            bandwidth_gb_s={int(k): float(v) for k, v in data.get("bandwidth_gb_s", {}).items()},
            code2wav_ms_per_frame={
                str(k): float(v) for k, v in data.get("code2wav_ms_per_frame", {}).items()
            },
            seconds=float(data.get("seconds", 0.0)),
        )

    def bandwidth(self, cores: int) -> float | None:
        """GB/s on `cores` cores: the nearest measured core count at or below it."""
        measured = [n for n in self.bandwidth_gb_s if n <= cores]
        return self.bandwidth_gb_s[max(measured)] if measured else None


@dataclass(frozen=True)
class SpeedInputs:
    """Everything the time per frame depends on besides the core counts."""

    footprint: ModelFootprint
    talker_dtype: str
    code2wav_dtype: str
    weights: str = "model"
    calibration: Calibration | None = None


def _speedup(cores: int, efficiency: float) -> float:
    return 1 + (max(cores, 1) - 1) * efficiency


def talker_ms(cores: int, inputs: SpeedInputs) -> float:
    """The talker stage's time per frame at batch 1 on `cores` cores."""
    calibration = inputs.calibration
    if calibration is not None and calibration.bandwidth(cores):
        quantized = inputs.weights in ("int8", "int4")
        weights_dtype = inputs.weights if quantized else inputs.talker_dtype
        streamed = inputs.footprint.streamed_bytes_per_frame(weights_dtype)
        bandwidth = calibration.bandwidth(cores) or 1.0
        return streamed / (bandwidth * 1e9) * 1e3 * costs.TALKER_MS_PER_STREAMED_MS
    table = (
        costs.INT8_TALKER_CORE_MS_PER_FRAME
        if inputs.weights in ("int8", "int4")
        else costs.TALKER_CORE_MS_PER_FRAME
    )
    efficiency = (
        costs.INT8_PARALLEL_EFFICIENCY
        if inputs.weights in ("int8", "int4")
        else costs.PARALLEL_EFFICIENCY[inputs.talker_dtype]
    )
    scale = costs.INT4_OF_INT8_TALKER if inputs.weights == "int4" else 1.0
    return table[inputs.talker_dtype] * scale / _speedup(cores, efficiency)


def code2wav_core_ms(chunk_frames: int, inputs: SpeedInputs) -> float:
    """Code2wav work per new frame on one core, with each chunk's re-decoded earlier frames
    (none with omni-cpu's streaming decode; 12 on vLLM-Omni's recompute path) and
    its share of the chunk's fixed cost."""
    dtype = inputs.code2wav_dtype
    measured = inputs.calibration.code2wav_ms_per_frame if inputs.calibration else {}
    per_frame = measured.get(dtype, costs.CODE2WAV_CORE_MS_PER_FRAME[dtype])
    decoded = per_frame * (chunk_frames + costs.CODEC_RECOMPUTED_FRAMES)
    return (decoded + costs.CODEC_CHUNK_CALL_MS) / chunk_frames


def code2wav_ms(cores: int, chunk_frames: int, inputs: SpeedInputs) -> float:
    efficiency = costs.PARALLEL_EFFICIENCY[inputs.code2wav_dtype]
    return code2wav_core_ms(chunk_frames, inputs) / _speedup(cores, efficiency)


def frame_ms(talker_cores: int, compute: int, chunk_frames: int, inputs: SpeedInputs) -> float:
    """A stream's time per frame: the slower stage of a split, or both stages in turn.

    Sharing, each stage runs on every core but the other's idle OpenMP threads spin
    on them (measured: a stage beside another's spinner loses ~22 %).
    """
    if talker_cores == SHARED or compute < 2:
        both = talker_ms(compute, inputs) + code2wav_ms(compute, chunk_frames, inputs)
        return both / (1 - costs.SHARED_SPIN_LOSS)
    return max(
        talker_ms(talker_cores, inputs),
        code2wav_ms(compute - talker_cores, chunk_frames, inputs),
    )


def best_split(compute: int, chunk_frames: int, inputs: SpeedInputs) -> int:
    """Talker cores of the fastest split; SHARED where sharing beats it by more than noise."""
    if compute < 2:
        return SHARED
    split = min(range(1, compute), key=lambda t: (frame_ms(t, compute, chunk_frames, inputs), t))
    split_ms = frame_ms(split, compute, chunk_frames, inputs)
    shared_ms = frame_ms(SHARED, compute, chunk_frames, inputs)
    return SHARED if shared_ms < split_ms * (1 - costs.SHARED_MIN_GAIN) else split


def choose_chunk_frames(talker_cores: int, compute: int, inputs: SpeedInputs) -> int:
    """The smallest chunk for which code2wav keeps up with the talker.

    Small chunks give smoother playback; where a chunk re-decodes earlier frames
    (OMNI_CPU_CODE2WAV=recompute) that overhead can make code2wav the bottleneck. Sharing cores,
    every chunk size costs the same turns, so the smallest is taken.
    """
    choices = costs.CODEC_CHUNK_FRAMES_CHOICES
    if talker_cores == SHARED:
        return choices[0]
    target = talker_ms(talker_cores, inputs)
    for chunk in choices:
        if code2wav_ms(compute - talker_cores, chunk, inputs) <= target:
            return chunk
    return choices[-1]
