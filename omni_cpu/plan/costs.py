"""Every constant the planner uses, named, with what it stands for and why.

The figures a constant is fitted to live in one place: benchmarks/calibrated.json names,
for each constant, the measurement it stands for (one current number, its
benchmarks/RESULTS.md entry and the arithmetic), and tests/plan/test_costs_current.py
fails while the cost model and a measurement disagree by more than the margin stated
there. The comments here cite those keys (`talker_step_ms:int8`) and say how each
constant follows; they do not repeat the figures. A re-measurement changes
calibrated.json (and RESULTS.md), and the constant here follows. `omni-cpu probe
--calibrate` measures the machine-dependent ones per machine (the profile keeps them);
change the built-ins here, never per machine. How the planner uses them: docs/planning.md.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from omni_cpu.checkpoint import geometry
from omni_cpu.weight_formats import INT4, INT8, MODEL, X86

GIB = 1 << 30
MIB = 1 << 20

# --- The talker stage's time per frame -----------------------------------------
# A talker step makes one 80 ms frame for every running stream: it streams the weights
# of the talker's layers once and the code predictor's 15 times (the footprint's
# `streamed_bytes_per_frame`), plus work that is not weight streaming (the code
# predictor's small torch calls, attention, norms, RoPE, sampling). So
#   step(1 stream) = streamed bytes / bandwidth of the stage's cores + overhead.
# The bandwidth is `probe --calibrate`'s at the stage's core count, else the built-in
# figure per core below times the cores, capped at one node's; the GEMV uses every
# thread of its stage, so the model follows as the kernels scale.
#
# Built-in read bandwidth of one core for the talker's GEMV: the 2-core Intel Xeon's
# `probe --calibrate` through the stage's own GEMV (calibrated.json
# `gemv_read_gb_s_one_core`). It is the slower of the measured classes, so an
# uncalibrated plan does not promise what the slower class misses.
GEMV_GB_S_PER_CORE = 13.0
# The most one memory node gives a stage, however many cores read: omni-cpu cannot see
# the DIMM channels, so a server socket's is assumed: a batch-1 GEMV streams about half of
# eight DDR4-3200 channels' peak. Not measured (calibrated.json `not_measured`: no box with
# more than two cores was); `probe --calibrate` replaces it.
NODE_READ_GB_S = 100.0


# Each weight format's bytes per weight and the step's rest at one stream on this reference
# machine (the Intel Xeon's `bench` runs with one talker core) are its entry in
# omni_cpu.weight_formats, beside its kernels: adding a format is one entry there. Other
# CPU classes leave a different overhead (CPU_CLASS_SPEEDS below), which is why a
# machine's plan is best calibrated.


class IsaClass(StrEnum):
    """The ISA classes the built-in speeds are read for (`isa_class`), in words."""

    AMX = "AMX"
    AVX512_BF16 = "AVX-512 with bf16"
    AVX512 = "AVX-512"
    AVX2 = "AVX2"
    X86_WITHOUT_AVX2 = "x86 without AVX2"
    ARM_BF16 = "Arm with bf16"
    ARM = "Arm"


# x86's classes by the flag that marks each, best first.
_X86_CLASSES = (
    ("amx_bf16", IsaClass.AMX),
    ("avx512_bf16", IsaClass.AVX512_BF16),
    ("avx512f", IsaClass.AVX512),
    ("avx2", IsaClass.AVX2),
)


def isa_class(architecture: str, isa: Iterable[str]) -> str:
    """The ISA class (an IsaClass) of a CPU; an architecture with none: its own name."""
    flags = set(isa)
    if architecture in X86:
        for flag, name in _X86_CLASSES:
            if flag in flags:
                return name.value
        return IsaClass.X86_WITHOUT_AVX2.value
    if architecture == "aarch64":
        return (IsaClass.ARM_BF16 if "bf16" in flags else IsaClass.ARM).value
    return architecture


@dataclass(frozen=True)
class KnownCpu:
    """A CPU its flags cannot tell apart from others of its ISA class, told by what it is:
    /proc/cpuinfo's vendor_id, cpu family and model (the facts' vendor, cpu_family,
    cpu_model)."""

    name: str  # the class's name, in words a buyer can check: "AMD Zen 5"
    isa_class: IsaClass
    vendor: str
    family: int
    models: tuple[tuple[int, int], ...]  # inclusive ranges of cpuinfo's `model`

    def is_this(self, vendor: str | None, family: int | None, model: int | None) -> bool:
        return (
            vendor == self.vendor
            and family == self.family
            and model is not None
            and any(low <= model <= high for low, high in self.models)
        )


# Zen 4 and Zen 5 both state AVX-512 with bf16 and no AMX. The models are Linux's
# (arch/x86/kernel/cpu/amd.c, bsp_init_amd: family 0x19 models 0x10-0x1f, 0x60-0xaf set
# X86_FEATURE_ZEN4, family 0x1a models 0x00-0x2f, 0x40-0x4f, 0x60-0x7f X86_FEATURE_ZEN5);
# Zen 4's list keeps to the models of shipped parts (Genoa, Raphael/Phoenix, Bergamo/Siena).
ZEN4 = KnownCpu(
    "AMD Zen 4",
    IsaClass.AVX512_BF16,
    "AuthenticAMD",
    0x19,
    ((0x10, 0x1F), (0x60, 0x7F), (0xA0, 0xAF)),
)
ZEN5 = KnownCpu(
    "AMD Zen 5",
    IsaClass.AVX512_BF16,
    "AuthenticAMD",
    0x1A,
    ((0x00, 0x2F), (0x40, 0x4F), (0x60, 0x7F)),
)
KNOWN_CPUS = (ZEN4, ZEN5)


def cpu_class(
    architecture: str,
    isa: Iterable[str],
    vendor: str | None = None,
    family: int | None = None,
    model: int | None = None,
) -> str:
    """The class whose built-in speeds apply: the CPU itself where its ISA class has CPUs
    told apart (KNOWN_CPUS), else its ISA class (`isa_class`)."""
    by_isa = isa_class(architecture, isa)
    for cpu in KNOWN_CPUS:
        if cpu.isa_class.value == by_isa and cpu.is_this(vendor, family, model):
            return cpu.name
    return by_isa


@dataclass(frozen=True)
class CpuClassSpeed:
    """Built-in talker speeds of an ISA class measured apart from the reference above."""

    gemv_gb_s_per_core: float  # what one core's GEMV streams the talker's weights at
    # The step's rest at one stream, per --weights; a format not listed: its reference
    # overhead (omni_cpu.weight_formats).
    step_overhead_ms: dict[str, float]
    measured_on: str  # the machine, in words a buyer can check
    # One prompt's prefill and hand-offs before its first step, ms (None: the reference's
    # TALKER_PREFILL_STEPS steps).
    prefill_ms: float | None = None
    # Code2wav's decoder per frame on one core, per dtype, inside the pipeline (the talker
    # streaming its weights on the next core): None for the reference's.
    code2wav_core_ms_per_frame: dict[str, float] | None = None
    # False: no machine of the class was measured; the numbers are derived from published
    # figures and the plan's assumptions say UNMEASURED.
    measured: bool = True


# Arm (aarch64): no Arm machine has run omni-cpu, so the class's talker read rate is derived
# from published single-core bandwidth, on the cautious side. Arm's own measurements (Arm
# Learning Paths, "Measure Arm single-core memory bandwidth with ASCT",
# learn.arm.com/learning-paths/servers-and-cloud-computing/memory-subsystem/streaming-bandwidth):
# one core reads DRAM at 20.9 GB/s on Graviton2 (Neoverse N1) and 37.0 GB/s on Graviton4
# (Neoverse V2); Graviton3 (Neoverse V1) sits between them. The slowest, N1's, times the share
# of a core's read bandwidth a whole int4 step reached on the Zen 5 (its bytes a frame over
# its one-stream step, calibrated.json `class_talker_step_ms:AMD Zen 5:int4`, 25 GB/s, against
# `probe --calibrate`'s 41 GB/s there: 0.61) is 12.7 GB/s; rounded down, 12.5, a little under
# the reference core's GEMV_GB_S_PER_CORE. Every other figure of the class (step overheads,
# prefill, code2wav) is the reference's, the Intel Xeon's larger ones.
# calibrated.json `not_measured` names it; `probe --calibrate` on an Arm box replaces it.
ARM_GEMV_GB_S_PER_CORE = 12.5

# By class (cpu_class above); a class not listed plans on the slowest listed CPU of its ISA
# class where it has any (`class_speed`), else on the reference numbers
# (GEMV_GB_S_PER_CORE, each format's omni_cpu.weight_formats entry), the Intel Xeon's, which
# for an unmeasured class are the cautious side. AMD Zen 4: the 2-core AMD EPYC Zen 4 KVM
# guest with the one-call code predictor step; AMD Zen 5: the 2-core AMD EPYC Zen 5 KVM guest
# (RESULTS.md, its table against the built-in plan). The measurements each number stands
# for are benchmarks/calibrated.json's `class_*` entries (one home;
# tests/plan/test_costs_current.py holds them together). How each
# follows: the step overhead is the one-stream step less the format's bytes a frame at
# the core's read rate (every format's at the rate the class reads now, though bf16's
# and int8's steps are older runs than int4's); the two-stream step
# (`class_talker_step_ms:<class>:int4:2`) holds TALKER_STEP_GROWTH_PER_STREAM, so the
# class keeps it; the prefill is first audio less one step and the 1-frame chunk's
# decode (without AMX it is no fraction of a step); code2wav's decoder per frame is the
# stage's ms a frame at 10-frame chunks less CODE2WAV_STAGE_MS_PER_FRAME and a tenth of
# CODE2WAV_CORE_MS_PER_CALL + CODEC_ENGINE_CALL_MS.
_ARM = CpuClassSpeed(
    gemv_gb_s_per_core=ARM_GEMV_GB_S_PER_CORE,
    step_overhead_ms={},
    measured_on="published Neoverse N1 per-core read bandwidth, no Arm machine measured",
    measured=False,
)
CPU_CLASS_SPEEDS = {
    ZEN4.name: CpuClassSpeed(
        gemv_gb_s_per_core=19.6,
        step_overhead_ms={MODEL.name: 22.2, INT8.name: 32.6, INT4.name: 8.4},
        measured_on="the 2-core AMD EPYC Zen 4's",
        prefill_ms=221.0,
    ),
    # Its read rate is `probe --calibrate`'s one-core bandwidth there; int4's rest is its
    # one-stream step less its bytes at that rate, bf16's what meets the measured RTF; int8
    # was not measured on it: the Zen 4's, the slower class's. The prefill is what puts the
    # model's one-stream p95 safe start on the measured one (bench 0.20 s, serve 0.22 s);
    # code2wav's decoder as in the rule above, from the stage's 19.8-20 ms a frame.
    ZEN5.name: CpuClassSpeed(
        gemv_gb_s_per_core=41.0,
        step_overhead_ms={MODEL.name: 20.3, INT8.name: 32.6, INT4.name: 15.8},
        measured_on="the 2-core AMD EPYC Zen 5's",
        prefill_ms=60.0,
        code2wav_core_ms_per_frame={"bfloat16": 7.7},
    ),
    IsaClass.ARM.value: _ARM,
    IsaClass.ARM_BF16.value: _ARM,
}


def class_speed(name: str) -> CpuClassSpeed | None:
    """The built-in speeds of a class (`cpu_class`): its own, else the slowest told-apart CPU
    of that ISA class (an unknown CPU is not promised a faster one's speed); None: the
    reference's."""
    own = CPU_CLASS_SPEEDS.get(name)
    return own if own is not None else CPU_CLASS_SPEEDS.get(slowest_known(name) or "")


def known_in(isa_class_name: str) -> list[str]:
    """The CPUs told apart within an ISA class (KNOWN_CPUS), by name."""
    return [cpu.name for cpu in KNOWN_CPUS if cpu.isa_class.value == isa_class_name]


def slowest_known(name: str) -> str | None:
    """For an ISA class with CPUs told apart, the measured one whose talker reads slowest;
    None for a class with its own speeds or none told apart."""
    if name in CPU_CLASS_SPEEDS:
        return None
    measured = [n for n in known_in(name) if n in CPU_CLASS_SPEEDS]
    return min(measured, key=lambda n: CPU_CLASS_SPEEDS[n].gemv_gb_s_per_core, default=None)


# The part of that overhead that divides over the talker's cores (the GEMV's work beyond
# its streaming, the threaded kernels); the rest (the small torch calls' dispatch, Python)
# runs on one core however many the stage has. Intel Xeon, int8, the talker stage alone
# in one process on two threads (calibrated.json `talker_step_ms:int8:2`): the step less
# its bytes at two cores' read rate is the two-thread overhead, and
# overhead(2) = overhead(1) x (1 - f + f / 2) gives f.
TALKER_OVERHEAD_PARALLEL_FRACTION = 0.73
# `probe --calibrate` times a mix of the small torch calls a talker step is made of
# (omni_cpu.bench.calibrate._small_op_us); each format's overhead scales by this machine's
# time over the time on the machine the overheads were fitted on, the Intel Xeon's best
# rounds on a quiet box (calibrated.json `small_op_us`).
REFERENCE_SMALL_OP_US = 3.0
# A step at b streams over one stream's: the weights stream once for every stream (the
# GEMV's register tiles hold up to 6 rows), but each stream adds its attention, sampling
# and the GEMV's multiply-adds. Fitted to the Intel Xeon's 4-stream step over its
# one-stream step (calibrated.json `four_stream_step_ratio:<format>`): the median
# format's ratio, per extra stream. The Zen 4's two-stream step holds it too
# (`class_talker_step_ms:AMD Zen 4:int4:2`).
TALKER_STEP_GROWTH_PER_STREAM = 0.085
# The talker step's p95 over its median, on a host that runs other work beside the stages
# (a cloud guest's neighbours, the OS): the chunk schedule and the predicted (p95) safe
# start are planned on a step times this (a run of steps by its square root:
# listening.frames_out_ms), so the safe start a plan states holds for the slow steps too,
# not only on a quiet run. bench's talker_step_ms_p95 over talker_step_ms on the 2-core
# Zen 4 guest (calibrated.json `talker_step_spread`; two 7-minute serve soaks on the same box
# agree); `probe --calibrate` measures no spread (its seconds cannot see a host's
# minutes). One figure for every class: the noise is the host's, not the ISA's.
TALKER_STEP_SPREAD = 1.2
# The prompt's prefill, in one-stream steps: the Intel Xeon's first audio less one step
# and code2wav's first 1-frame chunk, over the step (calibrated.json
# `first_audio_ms:<format>`); the median format's. AMX runs the prefill there; a CPU
# without it takes longer, which its class states as `prefill_ms` (CPU_CLASS_SPEEDS).
# Those runs had code2wav's slower decoder (before RESULTS.md "code2wav's decoder after
# the one-pass SnakeBeta ..."): with today's first chunk, the part of their first audio it
# no longer explains counts here, until an AMX box measures first audio again.
TALKER_PREFILL_STEPS = 0.65
# Each more prompt in the same prefill step costs another prompt's multiply-adds (prefill
# is compute-bound: RESULTS.md, "where the first audio's time goes"). Checked against the
# Intel Xeon's 4 streams' first audio (calibrated.json `four_stream_first_audio_ms:model`):
# the engine batches prefills somewhat better than one after another, within the margin.
PREFILL_GROWTH_PER_STREAM = 1.0

# --- Code2wav ---------------------------------------------------------------------
# One core, omni-cpu's streaming decoder alone (omni_cpu.models.code2wav), per dtype
# (calibrated.json `code2wav_decoder_ms_per_frame:<dtype>`). `probe --calibrate`
# measures both on the machine itself.
CODE2WAV_CORE_MS_PER_FRAME = {"bfloat16": 23.5, "float32": 48.5}
# The decoder's fixed cost per call, one core: a short chunk's time less its frames at
# CODE2WAV_CORE_MS_PER_FRAME (calibrated.json `code2wav_decoder_chunk_ms:<dtype>:<frames>`).
CODE2WAV_CORE_MS_PER_CALL = {"bfloat16": 27.0, "float32": 42.0}
# What the code2wav stage adds inside the engine beyond its decoder: per frame (the
# talker's weight streaming on the next core contends for memory with the decoder's
# activations) and per chunk (engine step, connector), where the stage's ms a frame =
# decoder + per frame + (per call + per chunk) / chunk frames. The per-chunk figure was
# fitted to bench's step log at two chunk sizes (RESULTS.md, "Limits with the arithmetic");
# the per-frame one follows calibrated.json `code2wav_stage_ms_per_frame:10`.
CODE2WAV_STAGE_MS_PER_FRAME = 7.0
CODEC_ENGINE_CALL_MS = 25.0
# Earlier frames each chunk decodes again, by code2wav decode mode (OMNI_CPU_CODE2WAV).
# omni-cpu's streaming decode (the default) carries the decoder's state between chunks
# and re-decodes none; vLLM-Omni's own async-chunk decode (`recompute`) re-runs the
# vocoder over 12 earlier frames (`_DOWNSTREAM_CONTEXT_FRAME` in the 12 Hz tokenizer,
# 0.30.0; its transformer's window re-run, ~2 % of the time, is left out).
CODEC_RECOMPUTED_FRAMES = {"stream": 0, "recompute": 12}
# Fraction of the ideal speed-up each extra core gives code2wav (and the split's cost
# model its turn): fitted to the talker's split-against-shared runs before omni-cpu's
# GEMV (bf16 on the Zen 4, float32 on the AVX2 EPYC). Not measured for code2wav alone
# (calibrated.json `not_measured`).
CODE2WAV_PARALLEL_EFFICIENCY = {"bfloat16": 0.2, "float32": 0.55}

# --- Compute split between the stages ---------------------------------------------
# Stages sharing cores run in turn, and each loses time to the other's idle OpenMP
# threads spinning on the same cores (docs/design.md, "Stages share no core"). Fitted
# with this model to the Intel Xeon's runs with both stages on both cores
# (calibrated.json `shared_rtf:<format>`): one fraction between bf16's and int8's.
# int4's shared run it misses; calibrated.json `misses` says why that changes no plan.
SHARED_SPIN_LOSS = 0.38
# Sharing costs first-audio latency under load and pipelining, and no shared plan measured
# on the 2-core boxes beat the 1 + 1 split (RESULTS.md, "every core and the matrix units"
# and "omni-cpu bench, float32 and int8, split and shared"): the model must find it
# clearly faster, by more than this policy margin, to share.
SHARED_MIN_GAIN = 0.15
# One codec frame is 80 ms of audio (12.5 Hz): a stream is real time while its frames
# come at least this often.
FRAME_AUDIO_MS = geometry.FRAME_MS

# --- Front-end reservation ------------------------------------------------------
# vLLM advises keeping a core free for the API server / engine core. A replica with
# at least this many cores gives one up (it costs <= 1/8 of its compute); smaller
# replicas (a 2-core box) keep every core for compute, where one reserved core
# would halve the throughput.
FRONTEND_RESERVE_MIN_CORES = 8
FRONTEND_RESERVED_CORES = 1

# --- Memory ---------------------------------------------------------------------
# Each process's peak PSS beyond its weights and KV cache, 0.6B bf16
# (calibrated.json `process_overhead_gib:<process>`: benchmarks/memory_per_process.py
# around `omni-cpu run`, one and four streams, the larger of the stages forked from the
# driver and spawned, plus a tenth). PSS, not RSS: torch's, vLLM's and triton's
# libraries (and, for forked stages, the driver's imported heap) are mapped by every
# process and counted once over all of them, where VmHWM counts them in each. The
# code2wav stage's is partly covered by CODE2WAV_KV_CACHE_BYTES below (its decoder has
# no vLLM attention layer, so nothing fills that budget).
TALKER_STAGE_OVERHEAD_BYTES = int(0.85 * GIB)
CODE2WAV_STAGE_OVERHEAD_BYTES = int(0.6 * GIB)
DRIVER_PROCESS_BYTES = int(0.85 * GIB)
# Beside its weights, the code2wav stage keeps the decoder's big convolutions' weights
# packed for oneDNN, one copy for each of up to CODE2WAV_PACKED_COPIES chunk shapes
# (omni_cpu.models.code2wav.PACKED_SHAPES; tests/models/test_code2wav.py holds the two
# equal and the count of weights to the 12 Hz codec's, which the 0.6B and 1.7B models share).
CODE2WAV_PACKED_COPIES = 3
CODE2WAV_PACKED_WEIGHTS = 51_000_000
# vLLM's CPU backend pages the KV cache in blocks of 128 tokens (vllm/platforms/cpu.py,
# 0.30.0) and its block pool keeps one of them as the null block. A stream needs
# whole blocks for max_model_len, and the cache one block more: with exactly one
# stream's tokens the talker refuses to start ("KV cache is needed ... available").
KV_BLOCK_TOKENS = 128
KV_RESERVED_BLOCKS = 1
# Left for the OS, page cache of the weights and everything else on the node.
MEMORY_SAFETY_FRACTION = 0.10
MEMORY_SAFETY_MIN_BYTES = 1 * GIB
# Node meminfo summing to less than this fraction of /proc/meminfo's MemTotal is not
# believed (seen on this project's sandboxed dev machines: 10 GiB of 24 GiB).
NODE_MEMORY_CREDIBLE_FRACTION = 0.9
# Code2wav keeps its sliding-window decoder state itself; its engine still needs
# an explicit KV allocation, or vLLM's CPU backend claims ~0.9x of node RAM.
CODE2WAV_KV_CACHE_BYTES = 256 * MIB

# --- Batching -------------------------------------------------------------------
# Concurrent streams per talker core: batching raises total throughput on CPU without
# helping a single stream; 4 per core keeps per-stream latency bounded and, with
# float32 on a small box, the KV cache a few GiB. A policy choice, not a fit.
STREAMS_PER_TALKER_CORE = 4
MAX_NUM_SEQS_CAP = 64  # vLLM-Omni's own deploy default for Qwen3-TTS
# vLLM-Omni deploy defaults for Qwen3-TTS (deploy/qwen3_tts.yaml, 0.30.0).
TALKER_MAX_NUM_BATCHED_TOKENS = 512  # small prefill steps keep first-chunk latency low
# Prompt (text tokens + ~10 control tokens) plus frames: room for `run`'s 2048-frame
# cap (164 s of audio) and a 256-token prompt. vLLM-Omni's GPU default is 4096, which
# doubles the KV cache every stream reserves for audio longer than anyone requests.
TALKER_MAX_FRAMES = 2048  # the talker's default max_tokens (vLLM-Omni's max_new_tokens)
TALKER_MAX_MODEL_LEN = TALKER_MAX_FRAMES + 256
# Code2wav prefill is num_code_groups * frames tokens (16 * 2148 = 34368): > 32k.
CODE2WAV_MAX_NUM_BATCHED_TOKENS = 65536
CODE2WAV_MAX_MODEL_LEN = 65536

# --- Streaming ------------------------------------------------------------------
# vLLM-Omni defaults: first chunk 1 frame (lowest time to first audio), then 25;
# the left context must cover the decoder's sliding attention window (72 frames).
# omni-cpu's streaming decode re-decodes no earlier frames, so a smaller chunk
# costs only its call: each utterance's last chunk is decoded after its last frame,
# so a smaller steady chunk shortens that wait (RESULTS.md, "the GEMV's column-block
# layout, small kernels, 10-frame chunks").
INITIAL_CODEC_CHUNK_FRAMES = 1
CODEC_CHUNK_FRAMES_CHOICES = (10, 25, 50, 100)
CODEC_LEFT_CONTEXT_FRAMES = 72
