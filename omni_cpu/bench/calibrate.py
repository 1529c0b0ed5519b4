"""`probe --calibrate`: measure what the cost model needs, on this machine, in <= 18 s.

Four measurements, at batch 1 as the talker and code2wav run (the kernels at 1-32 rows):
- weight-streaming bandwidth per core count: matrix-vector products over 1 GiB of
  weights, past any cache, GB/s of weights read, at 1, 2, 4, ... threads up to the
  usable physical cores, through the stage's own kernel (omni-cpu's GEMV where it is
  built, else torch's float32 GEMV: `_streamed_weights` says why; calibrated.json
  `gemv_read_gb_s_one_core` is the reference machine's);
- each linear kernel on the code predictor's shapes at 1-32 rows on every usable core
  (omni_cpu.kernels.timing), from which the planner picks the kernel per row
  count (omni_cpu.plan.kernel_choice);
- the talker step's overhead besides its weights: µs per call of the small torch ops a
  step is made of (norms, residual adds, activations, a softmax over a few positions,
  slicing), one thread, 1 x 1024 bf16 activations; the cost model scales its built-in
  per-step overhead by this over the time of the machine it was fitted on;
- code2wav's cost per decoded frame and per call on one core, in float32 and bfloat16:
  vLLM-Omni's 12 Hz decoder with random weights (the 0.6B tokenizer config) through
  omni-cpu's streaming decode (omni_cpu.models.code2wav, what the stage runs),
  chunks carrying its state on; per frame the time of a 6-frame chunk minus a 2-frame
  one, over 4, per call what the 2-frame chunk leaves.

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

from omni_cpu.profile.calibration import Calibration

# The child that measures code2wav is killed at the end of it; with torch's import and the
# plan, `probe --calibrate` stays under 20 s.
BUDGET_S = 17.5
# Per core count: enough rotations through 1 GiB of weights to time reliably, past any
# last-level cache (the 2-core Xeon KVM guest sees 480 MiB of L3).
BANDWIDTH_BYTES = 1024 << 20
BANDWIDTH_SECONDS = 0.4
SMALL_OP_SECONDS = 0.3
CODE2WAV_RESERVE_S = 12.0
KERNEL_BUDGET_S = 2.5  # all formats, kernels and row counts: ~1.5-2.5 s on 2 cores
KERNEL_ROWS = (1, 4, 16, 32)


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
    """Measure this machine; never longer than `budget_s` (what does not fit is skipped).

    `dtype` is the plan's talker dtype; none of these measurements depends on it.
    """
    del dtype
    start = time.perf_counter()

    def left() -> float:
        return budget_s - (time.perf_counter() - start)

    import torch

    saved_threads = torch.get_num_threads()
    bandwidth: dict[int, float] = {}
    code2wav: dict[str, float] = {}
    kernels: dict[str, Any] = {}
    try:
        weights, vector = _streamed_weights(torch)
        for count in core_counts(cores):
            # Keep room for code2wav (importing vLLM-Omni's decoder takes ~8 s).
            if left() < BANDWIDTH_SECONDS + CODE2WAV_RESERVE_S:
                break
            torch.set_num_threads(count)
            bandwidth[count] = round(_stream_gb_s(torch, weights, vector), 2)
            if progress:
                progress(f"{count} core(s): {bandwidth[count]} GB/s of weights")
        del weights
        # Which kernel at which row count (omni_cpu.plan.kernel_choice chooses from it).
        kernels = _kernel_times(cores, min(KERNEL_BUDGET_S, left() - CODE2WAV_RESERVE_S))
        if kernels.get("ms") and progress:
            progress(f"kernels timed on {cores} thread(s) at rows {KERNEL_ROWS}")
        small_op_us = 0.0
        if left() >= SMALL_OP_SECONDS + CODE2WAV_RESERVE_S:
            torch.set_num_threads(1)
            small_op_us = _small_op_us(torch)
            if progress:
                progress(f"talker step's small ops: {small_op_us} µs per call on one thread")
        code2wav = _code2wav_in_child(left())
        per_frame = {k: v for k, v in code2wav.items() if ":" not in k}
        per_call = {k.removesuffix(":call"): v for k, v in code2wav.items() if k.endswith(":call")}
        for name, ms in per_frame.items():
            if progress:
                progress(
                    f"code2wav {name}: {ms} ms per frame, {per_call.get(name, '?')} ms per call "
                    "on one core"
                )
    finally:
        torch.set_num_threads(saved_threads)
    return Calibration(
        bandwidth_gb_s=bandwidth,
        code2wav_ms_per_frame=per_frame,
        seconds=round(time.perf_counter() - start, 1),
        code2wav_ms_per_call=per_call,
        small_op_us=small_op_us,
        kernels=kernels,
    )


def _kernel_times(threads: int, budget_s: float) -> dict[str, Any]:
    """omni_cpu.kernels.timing within `budget_s`; {} without the runtime or time."""
    if budget_s < 1:
        return {}
    try:
        from omni_cpu.kernels.timing import time_kernels
    except ImportError:
        return {}
    return time_kernels(threads, budget_s, rows=KERNEL_ROWS)


def _small_op_us(torch: Any) -> float:
    """µs per small torch call, over about SMALL_OP_SECONDS: the best of six rounds (the
    quietest one: other work on the cores only ever adds)."""
    x = torch.ones(1, 1024, dtype=torch.bfloat16)
    gain = torch.ones(1024, dtype=torch.bfloat16)
    scores = torch.ones(16, 9, dtype=torch.bfloat16)
    calls_per_pass = 10

    def one_pass() -> None:
        # An RMSNorm with its residual add, an activation, attention's softmax, a slice.
        y = x + x
        variance = y.float().pow(2).mean(-1, keepdim=True)
        y = (y * torch.rsqrt(variance + 1e-6)).to(torch.bfloat16) * gain
        torch.nn.functional.silu(y)
        torch.softmax(scores, dim=-1)
        torch.cat((y[:, :512], y[:, 512:]), dim=-1)

    best = float("inf")
    with torch.no_grad():
        one_pass()
        for _ in range(6):
            passes = 0
            begin = time.perf_counter()
            while time.perf_counter() - begin < SMALL_OP_SECONDS / 6:
                one_pass()
                passes += 1
            best = min(best, (time.perf_counter() - begin) / (passes * calls_per_pass))
    return round(best * 1e6, 2)


def _streamed_weights(torch: Any) -> tuple[list[tuple[Any, int]], Any]:
    """(product, bytes) pairs over BANDWIDTH_BYTES of weights, and the vector they take.

    The stage's own kernel where it exists: omni-cpu's bf16 GEMV, on AVX-512 tiles as at
    one row. torch's float32 GEMV reads faster than the GEMV in the stage streams
    (RESULTS.md, "Calibration against bench"), so a plan calibrated with it promised more
    than the stage did. Elsewhere torch's float32 one, which streams at about the rate the
    fallback kernels do (torch's bf16 GEMV is compute-bound at batch 1 on some CPUs).
    """
    rows = 4096
    try:
        from omni_cpu.kernels import gemv

        module = gemv.kernel()
    except ImportError:
        module = None
    if module is not None:
        columns = BANDWIDTH_BYTES // (2 * rows * 2)
        products = []
        for _ in range(2):
            packed = gemv.PackedBf16Weights(torch.ones(rows, columns, dtype=torch.bfloat16), module)
            packed.amx_rows = 0
            products.append((packed, rows * columns * 2))
        return products, torch.ones(1, columns, dtype=torch.bfloat16)
    columns = BANDWIDTH_BYTES // (2 * rows * 4)
    # The values do not change the bytes read; ones avoid denormals and a slow fill.
    weights = [torch.ones(rows, columns) for _ in range(2)]
    return [
        (lambda x, w=w: torch.nn.functional.linear(x, w), w.numel() * 4) for w in weights
    ], torch.ones(1, columns)


def _stream_gb_s(torch: Any, weights: list[tuple[Any, int]], vector: Any) -> float:
    """GB/s of weights a matrix-vector product reads, over about BANDWIDTH_SECONDS."""
    read = 0
    begin = time.perf_counter()
    with torch.no_grad():
        while time.perf_counter() - begin < BANDWIDTH_SECONDS:
            for product, size in weights:
                product(vector)
                read += size
    return read / (time.perf_counter() - begin) / 1e9


def _code2wav_in_child(seconds: float) -> dict[str, float]:
    """The code2wav measurement in a child process killed at `seconds`: the budget holds."""
    if seconds < 3:
        return {}
    command = [sys.executable, "-m", "omni_cpu.models.code2wav_timing", str(seconds)]
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
