"""The cost model: a stream's time per frame for a core split, from constants or a calibration.

Pure. The talker's step is its weights' bytes per frame over the bandwidth of the
stage's cores plus a per-step overhead that is not weight streaming (part of it
divides over the stage's cores, the rest runs on one); code2wav's
time per new frame is its decoder's per frame plus each chunk's fixed cost, spread
over the chunk. Without a calibration every number is a constant of
omni_cpu.plan.costs, stated with where it was measured; with one (`omni-cpu probe
--calibrate`, kept in the profile's machine block) the bandwidth per core count, the
small-op time behind the overhead and code2wav's costs are this machine's.
"""

from __future__ import annotations

from dataclasses import dataclass

from omni_cpu import weight_formats
from omni_cpu.plan import costs
from omni_cpu.plan.costs import CpuClassSpeed
from omni_cpu.plan.footprint import ModelFootprint
from omni_cpu.profile.calibration import Calibration

SHARED = 0  # a talker core count meaning: both stages share every compute core


@dataclass(frozen=True)
class SpeedInputs:
    """Everything the time per frame depends on besides the core counts."""

    footprint: ModelFootprint
    talker_dtype: str
    code2wav_dtype: str
    weights: str = "model"
    calibration: Calibration | None = None
    code2wav_decode: str = "stream"  # OMNI_CPU_CODE2WAV: stream or recompute
    # The class (costs.cpu_class) whose built-in speeds apply (costs.class_speed); "" or a
    # class with none: the reference constants.
    cpu_class: str = ""
    # The share of its local bandwidth the talker's memory gives it: below 1 where the
    # memory is remote to its CPUs (omni_cpu.plan.remote).
    memory_bandwidth_share: float = 1.0

    @property
    def class_speed(self) -> CpuClassSpeed | None:
        """This class's built-in talker speeds, where it has its own (costs.class_speed)."""
        return costs.class_speed(self.cpu_class)

    @property
    def weight_format(self) -> str:
        """The talker's weights as a user names them: int8, or the stage dtype."""
        return self.weights if weight_formats.get(self.weights).quantized else self.talker_dtype


@dataclass(frozen=True)
class StageCores:
    """A replica's compute split as the cost model sees it."""

    talker: int  # SHARED where both stages share every compute core
    compute: int

    @property
    def talker_cores(self) -> int:
        return self.compute if self.talker == SHARED else self.talker

    @property
    def code2wav_cores(self) -> int:
        return self.compute if self.talker == SHARED else self.compute - self.talker

    @property
    def turns(self) -> float:
        """Sharing cores, the stages run in turn and lose the other's spinning: the factor."""
        return 1 / (1 - costs.SHARED_SPIN_LOSS) if self.talker == SHARED else 1.0


def _speedup(cores: int, efficiency: float) -> float:
    return 1 + (max(cores, 1) - 1) * efficiency


def talker_bandwidth_gb_s(cores: int, inputs: SpeedInputs) -> float:
    """GB/s the talker's cores stream weights at: measured, else per core up to a node's."""
    measured = inputs.calibration.bandwidth(cores) if inputs.calibration else None
    if measured:
        return measured * inputs.memory_bandwidth_share
    own = inputs.class_speed
    per_core = own.gemv_gb_s_per_core if own else costs.GEMV_GB_S_PER_CORE
    local = min(max(cores, 1) * per_core, costs.NODE_READ_GB_S)
    return local * inputs.memory_bandwidth_share


def talker_overhead_ms(inputs: SpeedInputs, cores: int = 1) -> float:
    """The step's time that is not weight streaming, at one stream, on `cores` cores."""
    own = inputs.class_speed
    overhead = weight_formats.get(inputs.weights).step_overhead_ms
    if own is not None:
        overhead = own.step_overhead_ms.get(inputs.weights, overhead)
    measured = inputs.calibration.small_op_us if inputs.calibration else 0.0
    if measured:
        overhead *= measured / costs.REFERENCE_SMALL_OP_US
    parallel = costs.TALKER_OVERHEAD_PARALLEL_FRACTION
    return overhead * (1 - parallel + parallel / max(cores, 1))


def talker_step_ms(cores: int, inputs: SpeedInputs, streams: int = 1) -> float:
    """One talker step (a frame for each of `streams` streams) on `cores` cores."""
    streamed = inputs.footprint.streamed_bytes_per_frame(inputs.talker_dtype, inputs.weights)
    one = streamed / (talker_bandwidth_gb_s(cores, inputs) * 1e9) * 1e3
    one += talker_overhead_ms(inputs, cores)
    return one * (1 + (max(streams, 1) - 1) * costs.TALKER_STEP_GROWTH_PER_STREAM)


def prefill_ms(cores: int, inputs: SpeedInputs) -> float:
    """One prompt's prefill before its first step: the class's own, else in reference steps."""
    own = inputs.class_speed
    if own is not None and own.prefill_ms is not None:
        return own.prefill_ms
    return costs.TALKER_PREFILL_STEPS * talker_step_ms(cores, inputs)


def streams_prefill_ms(cores: StageCores, inputs: SpeedInputs, streams: int = 1) -> float:
    """The prefill of `streams` prompts that start together, before their first step."""
    prefill = prefill_ms(cores.talker_cores, inputs)
    return prefill * (1 + (streams - 1) * costs.PREFILL_GROWTH_PER_STREAM) * cores.turns


def talker_ms(cores: int, inputs: SpeedInputs) -> float:
    """The talker stage's time per frame at batch 1 on `cores` cores."""
    return talker_step_ms(cores, inputs)


def code2wav_costs(inputs: SpeedInputs) -> tuple[float, float]:
    """Code2wav's ms per decoded frame and per call on one core (measured, else constants)."""
    dtype = inputs.code2wav_dtype
    calibration = inputs.calibration
    per_frame = (calibration.code2wav_ms_per_frame if calibration else {}).get(dtype)
    per_call = (calibration.code2wav_ms_per_call if calibration else {}).get(dtype)
    own = inputs.class_speed
    built_in = (own.code2wav_core_ms_per_frame or {}) if own else {}
    return (
        built_in.get(dtype, costs.CODE2WAV_CORE_MS_PER_FRAME[dtype])
        if per_frame is None
        else per_frame,
        costs.CODE2WAV_CORE_MS_PER_CALL[dtype] if per_call is None else per_call,
    )


def code2wav_chunk_core_ms(frames: int, inputs: SpeedInputs) -> float:
    """One chunk of `frames` new frames through the code2wav stage, on one core."""
    per_frame, per_call = code2wav_costs(inputs)
    recomputed = costs.CODEC_RECOMPUTED_FRAMES[inputs.code2wav_decode]
    decoded = per_frame * (frames + recomputed) + costs.CODE2WAV_STAGE_MS_PER_FRAME * frames
    return decoded + per_call + costs.CODEC_ENGINE_CALL_MS


def code2wav_core_ms(chunk_frames: int, inputs: SpeedInputs) -> float:
    """Code2wav work per new frame on one core, with each chunk's re-decoded earlier frames
    (none with omni-cpu's streaming decode; 12 on vLLM-Omni's recompute path) and
    its share of the chunk's fixed cost."""
    return code2wav_chunk_core_ms(chunk_frames, inputs) / chunk_frames


def code2wav_chunk_ms(frames: int, cores: int, inputs: SpeedInputs) -> float:
    """One chunk of `frames` new frames through the code2wav stage on `cores` cores."""
    efficiency = costs.CODE2WAV_PARALLEL_EFFICIENCY[inputs.code2wav_dtype]
    return code2wav_chunk_core_ms(frames, inputs) / _speedup(cores, efficiency)


def code2wav_ms(cores: int, chunk_frames: int, inputs: SpeedInputs) -> float:
    """Code2wav's time per new frame of one stream on `cores` cores."""
    return code2wav_chunk_ms(chunk_frames, cores, inputs) / chunk_frames


def frame_ms(
    talker_cores: int, compute: int, chunk_frames: int, inputs: SpeedInputs, streams: int = 1
) -> float:
    """The time between a stream's frames with `streams` streams running: the slower stage
    of a split, or both stages in turn.

    Sharing, each stage runs on every core but the other's idle OpenMP threads spin
    on them (SHARED_SPIN_LOSS; docs/design.md, "Stages share no core").
    """
    decode = streams * code2wav_ms(
        compute if talker_cores == SHARED else compute - talker_cores, chunk_frames, inputs
    )
    if talker_cores == SHARED or compute < 2:
        both = talker_step_ms(compute, inputs, streams) + decode
        return both / (1 - costs.SHARED_SPIN_LOSS)
    return max(talker_step_ms(talker_cores, inputs, streams), decode)


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
