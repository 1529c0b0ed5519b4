"""The stage model code: what omni-cpu changes in vLLM-Omni's Qwen3-TTS modules on CPU.

Which kernel multiplies each linear (`linears`), int8 weights (`int8`; int4 is the
GEMV's own format), the talker's norms on vLLM's fused kernels (`norms`), the
sampler without its first-request compile (`sampler`), the code predictor's KV-cached
forwards (`cached_predictor`, `fused_predictor`, chosen by `predictor`) and
code2wav's streaming decode (`code2wav`, timed by `code2wav_timing`). Each module
names the vLLM / vLLM-Omni version it was written against. The vLLM plugin
(omni_cpu.platform) installs them when a stage loads its model.
"""
