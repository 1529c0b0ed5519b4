"""`probe --calibrate`: measure what the cost model needs, on this machine, in <= 19 s.

Three measurements, the first and last at batch 1 as the talker and code2wav run:
- weight-streaming bandwidth per core count: matrix-vector products over weight
  matrices far larger than any cache (torch's linear, the plan's dtype), GB/s of
  weights read, at 1, 2, 4, ... threads up to the usable physical cores;
- each linear kernel on the code predictor's shapes at 1-32 rows on every usable
  core (omni_cpu.platform.kernel_timing), from which the planner picks the kernel
  per row count (omni_cpu.plan.kernels);
- code2wav's cost per decoded frame on one core, in float32 and bfloat16: vLLM-Omni's
  12 Hz decoder with random weights (the 0.6B tokenizer config), the time for 6
  frames minus the time for 2, over 4.

torch (and vLLM-Omni for the decoder) are imported here only, lazily: the probe
without --calibrate imports neither. What cannot be measured in the time left is
left out, and the planner falls back to the constants of omni_cpu.plan.costs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from omni_cpu.plan.speed import Calibration

BUDGET_S = 18.5  # the child that measures code2wav is killed at the end of it
# Per core count: enough rotations through 512 MiB of weights to time reliably.
BANDWIDTH_BYTES = 512 << 20
BANDWIDTH_SECONDS = 0.4
CODE2WAV_FRAMES = (2, 6)
CODE2WAV_RESERVE_S = 10.0
KERNEL_BUDGET_S = 4.0  # the kernel timings (all formats, kernels, row counts) take ~2-3 s
KERNEL_ROWS = (1, 4, 8, 16, 32)


def core_counts(cores: int) -> list[int]:
    """1, 2, 4, ... and the machine's own count (at most 6 points)."""
    counts = []
    n = 1
    while n < cores and len(counts) < 5:
        counts.append(n)
        n *= 2
    counts.append(max(1, cores))
    return sorted(set(counts))


def calibrate(
    cores: int,
    dtype: str,
    budget_s: float = BUDGET_S,
    progress: Callable[[str], None] | None = None,
) -> Calibration:
    """Measure this machine; never longer than `budget_s` (what does not fit is skipped)."""
    start = time.perf_counter()

    def left() -> float:
        return budget_s - (time.perf_counter() - start)

    import torch

    saved_threads = torch.get_num_threads()
    bandwidth: dict[int, float] = {}
    code2wav: dict[str, float] = {}
    kernels: dict[str, Any] = {}
    try:
        torch_dtype = torch.bfloat16 if dtype == "bfloat16" else torch.float32
        rows = 4096
        element = torch.tensor([], dtype=torch_dtype).element_size()
        columns = BANDWIDTH_BYTES // (2 * rows * element)
        # The values do not change the bytes read; ones avoid denormals and a slow fill.
        weights = [torch.ones(rows, columns, dtype=torch_dtype) for _ in range(2)]
        vector = torch.ones(1, columns, dtype=torch_dtype)
        for count in core_counts(cores):
            # Keep room for code2wav (importing vLLM-Omni's decoder takes ~8 s).
            if left() < BANDWIDTH_SECONDS + CODE2WAV_RESERVE_S:
                break
            torch.set_num_threads(count)
            bandwidth[count] = round(_stream_gb_s(torch, weights, vector), 2)
            if progress:
                progress(f"{count} core(s): {bandwidth[count]} GB/s of weights")
        del weights
        # Which kernel at which row count (omni_cpu.plan.kernels chooses from it).
        kernels = _kernel_times(cores, min(KERNEL_BUDGET_S, left() - CODE2WAV_RESERVE_S))
        if kernels.get("ms") and progress:
            progress(f"kernels timed on {cores} thread(s) at rows {KERNEL_ROWS}")
        code2wav = _code2wav_in_child(left())
        for name, ms in code2wav.items():
            if progress:
                progress(f"code2wav {name}: {ms} ms per frame on one core")
    finally:
        torch.set_num_threads(saved_threads)
    return Calibration(
        bandwidth_gb_s=bandwidth,
        code2wav_ms_per_frame=code2wav,
        seconds=round(time.perf_counter() - start, 1),
        kernels=kernels,
    )


def _kernel_times(threads: int, budget_s: float) -> dict[str, Any]:
    """omni_cpu.platform.kernel_timing within `budget_s`; {} without the runtime or time."""
    if budget_s < 1:
        return {}
    try:
        from omni_cpu.platform.kernel_timing import time_kernels
    except ImportError:
        return {}
    return time_kernels(threads, budget_s, rows=KERNEL_ROWS)


def _stream_gb_s(torch: Any, weights: list[Any], vector: Any) -> float:
    """GB/s of weights a matrix-vector product reads, over about BANDWIDTH_SECONDS."""
    read = 0
    begin = time.perf_counter()
    with torch.no_grad():
        while time.perf_counter() - begin < BANDWIDTH_SECONDS:
            for weight in weights:
                torch.nn.functional.linear(vector, weight)
                read += weight.numel() * weight.element_size()
    return read / (time.perf_counter() - begin) / 1e9


def _code2wav_in_child(seconds: float) -> dict[str, float]:
    """The code2wav measurement in a child process killed at `seconds`: the budget holds."""
    if seconds < 3:
        return {}
    command = [sys.executable, "-m", "omni_cpu.bench.calibrate", "--code2wav", str(seconds)]
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=seconds).stdout
    except subprocess.TimeoutExpired as expired:  # keep what it finished
        out = expired.stdout or ""
    if isinstance(out, bytes):
        out = out.decode(errors="replace")
    found: dict[str, Any] = {}
    for line in reversed(out.splitlines()):
        try:
            found = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(found, dict):
            break
        found = {}
    return {str(k): float(v) for k, v in found.items() if float(v) > 0}


def _code2wav_ms(torch: Any, left: Callable[[], float]) -> dict[str, float]:
    """ms per decoded frame on one core per dtype; what time allows, {} without vLLM-Omni."""
    try:
        from vllm_omni.model_executor.models.qwen3_tts.tokenizer_12hz import (
            configuration_qwen3_tts_tokenizer_v2 as tokenizer_config,
        )
        from vllm_omni.model_executor.models.qwen3_tts.tokenizer_12hz import (
            modeling_qwen3_tts_tokenizer_v2 as tokenizer_model,
        )
    except ImportError:
        return {}
    from omni_cpu.checkpoint.configs import speech_tokenizer_config

    config = tokenizer_config.Qwen3TTSTokenizerV2Config(**speech_tokenizer_config("0.6b"))
    decoder = tokenizer_model.Qwen3TTSTokenizerV2Decoder._from_config(config.decoder_config)
    decoder.eval()
    if hasattr(decoder, "precompute_snake_caches"):
        decoder.precompute_snake_caches()
    groups = int(config.decoder_config.num_quantizers)
    generator = torch.Generator().manual_seed(0)
    codes = torch.randint(0, 2048, (1, groups, max(CODE2WAV_FRAMES)), generator=generator)
    few, many = CODE2WAV_FRAMES
    measured: dict[str, float] = {}
    with torch.no_grad():
        for name, torch_dtype in (("bfloat16", torch.bfloat16), ("float32", torch.float32)):
            if left() < 2.5:
                break
            model = decoder.to(torch_dtype)
            model(codes[..., :1])  # warm-up: first calls pay for allocation and dispatch
            times = {}
            for frames in (few, many):
                begin = time.perf_counter()
                model(codes[..., :frames])
                times[frames] = time.perf_counter() - begin
            if times[many] <= times[few]:
                continue  # noise swamped the difference: keep the constant
            measured[name] = round((times[many] - times[few]) / (many - few) * 1e3, 1)
            print(json.dumps(measured), flush=True)  # what is done survives a kill
    return measured


if __name__ == "__main__":  # the child of _code2wav_in_child
    if len(sys.argv) == 3 and sys.argv[1] == "--code2wav":
        import torch

        torch.set_num_threads(1)
        deadline = time.perf_counter() + float(sys.argv[2])
        _code2wav_ms(torch, lambda: deadline - time.perf_counter())
