"""Which CPU GEMV kernel streams a Qwen3-TTS layer's weights fastest, at batch 1 and 4?

Candidates: omni-cpu's GEMV (omni_cpu.kernels.gemv) in bf16, W8A8 and W4A8 (int4 in
groups of 32) and its AVX2 build in the same three (run here whatever the CPU), torch's bf16
linear, vLLM's oneDNN GEMM in bf16 and float32, FBGEMM dynamic int8 (omni-cpu's int8
path on AVX2), torch's weight-only int8 (`_weight_int8pack_mm`) and vLLM's weight-only
int4 (`cpu_gemm_wna16`). vLLM's oneDNN W8A8 (`onednn_scaled_mm`) was tried and gave
wrong results through this direct call (error inf), at FBGEMM's speed; it is left out.

Runs each candidate kernel over the code predictor's 5 layers (the 0.6B shapes:
qkv 1024->4096, o 2048->1024, gate_up 1024->6144, down 3072->1024), weights
rotating through DRAM (157 MB in bf16, several times the L3), one thread unless
--threads says otherwise. Reports ms per 5-layer step and the weight bytes per
second it streamed, beside a plain read of 512 MB (the memory ceiling of the
same threads). Also the relative error of each int8/int4 scheme against the
float32 product.

    .venv/bin/python benchmarks/gemv_kernels.py [--threads 1] [--rows 1,4] [--json FILE]
        [--copies N]

--copies N packs each of the 20 matrices N times (distinct memory, same values), for
hosts whose L3 holds the 5 layers' int8 or int4 weights (the 2-core Xeon KVM guest
reports 480 MiB of L3: 79 MB of int8 came back at 22 GB/s against a 12.6 GB/s plain
read). The float32 masters are shared, so oneDNN f32 stays cached; leave it out then.

The "AMX" rows run omni-cpu's packed weights through AMX tiles at every M (the
stage itself switches to them from OMNI_CPU_AMX_ROWS rows up); the plain GEMV
rows never use AMX.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import torch

SHAPES = [(4096, 1024), (1024, 2048), (6144, 1024), (1024, 3072)]  # (out, in) per layer
LAYERS = 5


def read_bandwidth(threads: int) -> float:
    data = torch.ones(512 * 2**20 // 4, dtype=torch.float32)
    data.sum()
    best = 0.0
    for _ in range(5):
        start = time.perf_counter()
        data.sum()
        best = max(best, data.numel() * 4 / (time.perf_counter() - start))
    return best / 1e9


def time_step(calls: list[Callable[[], torch.Tensor]], repeats: int) -> float:
    for call in calls:
        call()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for call in calls:
            call()
        best = min(best, time.perf_counter() - start)
    return best


def make_kernels(weights: list[torch.Tensor]) -> dict[str, Callable]:
    """name -> factory(weight_fp32, rows) returning (call on x, bytes, output for error)."""
    from vllm import _custom_ops as ops

    kernels: dict[str, Callable] = {}

    def torch_bf16(w: torch.Tensor):
        wb = w.to(torch.bfloat16)
        return (lambda x: torch.nn.functional.linear(x, wb)), wb.numel() * 2, torch.bfloat16

    def onednn_bf16(w: torch.Tensor):
        wb = w.to(torch.bfloat16)
        handler = ops.create_onednn_mm(wb.t(), 32)
        return (lambda x: ops.onednn_mm(handler, x, None)), wb.numel() * 2, torch.bfloat16

    def onednn_f32(w: torch.Tensor):
        handler = ops.create_onednn_mm(w.t(), 32)
        return (lambda x: ops.onednn_mm(handler, x, None)), w.numel() * 4, torch.float32

    def per_channel_int8(w: torch.Tensor):
        scale = (w.abs().amax(dim=1, keepdim=True) / 127.0).clamp(min=1e-12)
        q = torch.round(w / scale).clamp(-127, 127).to(torch.int8)
        return q, scale.squeeze(1)

    def fbgemm_dynamic(w: torch.Tensor):
        from omni_cpu.kernels.fbgemm import Int8Weights

        packed = Int8Weights(w)
        return (lambda x: packed(x)), w.numel(), torch.float32

    def int8pack_w8a16(w: torch.Tensor):
        q, scale = per_channel_int8(w)
        scales = scale.to(torch.bfloat16)
        return (lambda x: torch._weight_int8pack_mm(x, q, scales)), w.numel(), torch.bfloat16

    def wna16_int4(w: torch.Tensor, group: int = 128):
        from vllm.model_executor.layers.quantization.utils.quant_utils import (
            pack_quantized_values_into_int32,
        )
        from vllm.scalar_type import scalar_types

        n, k = w.shape
        wg = w.reshape(n, k // group, group)
        scale = (wg.abs().amax(dim=2, keepdim=True) / 7.0).clamp(min=1e-12)
        q = (torch.round(wg / scale).clamp(-8, 7) + 8).to(torch.int32).reshape(n, k)
        qt = q.t().contiguous()  # [K, N], values 0..15 (uint4b8)
        wtype = scalar_types.uint4b8
        # vLLM's CPUWNA16 layout: packed along N, 16 output channels per block.
        packed = pack_quantized_values_into_int32(qt, wtype, 1)
        pack_factor = 8
        packed = (
            packed.view(k, -1, 16 // pack_factor)
            .permute(1, 0, 2)
            .reshape(-1, k * 16 // pack_factor)
            .contiguous()
        )
        scales = scale.squeeze(2).t().contiguous().to(torch.bfloat16)  # [groups, N]

        def call(x: torch.Tensor) -> torch.Tensor:
            return ops.cpu_gemm_wna16(x, packed, scales, None, None, 8, "vec")

        return call, w.numel() // 2 + scales.numel() * 2, torch.bfloat16

    def omni(kind: str, amx_rows: int):
        def factory(w: torch.Tensor):
            from omni_cpu.kernels import gemv

            module = gemv.kernel()
            if module is None:
                raise RuntimeError("no avx512_bf16/vnni here")
            if amx_rows and not (gemv.amx_supported() and module.amx_ready()):
                raise RuntimeError("no AMX here")
            if kind == "bf16":
                packed = gemv.PackedBf16Weights(w.to(torch.bfloat16), module)
                size = w.numel() * 2
            else:
                packed = gemv.PackedInt8Weights(w, module)
                size = w.numel()
            packed.amx_rows = amx_rows  # the tiles this row names, whatever the machine's choice
            return packed, size, torch.bfloat16

        return factory

    def omni_w4a8(w: torch.Tensor):
        from omni_cpu.kernels import gemv

        module = gemv.kernel()
        if module is None:
            raise RuntimeError("no avx512_bf16/vnni here")
        packed = gemv.PackedInt4Weights(w, module)
        return packed, packed.packed.numel() + packed.scales.numel() * 2, torch.bfloat16

    def avx2(fmt: str):
        def factory(w: torch.Tensor):
            from omni_cpu.kernels import gemv

            module = gemv.avx2_kernel()
            if module is None:
                raise RuntimeError("no AVX2 here")
            if fmt == "int4":
                packed = gemv.PackedInt4Weights(w, module)
                return packed, packed.packed.numel() + packed.scales.numel() * 2, torch.bfloat16
            if fmt == "bf16":
                return (
                    gemv.PackedBf16Weights(w.to(torch.bfloat16), module),
                    w.numel() * 2,
                    torch.bfloat16,
                )
            return gemv.PackedInt8Weights(w, module), w.numel(), torch.bfloat16

        return factory

    kernels["omni-cpu GEMV bf16"] = omni("bf16", 0)
    kernels["omni-cpu GEMV bf16 AMX"] = omni("bf16", 1)
    kernels["omni-cpu GEMV W8A8"] = omni("int8", 0)
    kernels["omni-cpu GEMV W8A8 AMX"] = omni("int8", 1)
    kernels["omni-cpu GEMV W4A8"] = omni_w4a8
    kernels["omni-cpu AVX2 bf16"] = avx2("bf16")
    kernels["omni-cpu AVX2 W8A8"] = avx2("int8")
    kernels["omni-cpu AVX2 W4A8"] = avx2("int4")
    kernels["torch bf16"] = torch_bf16
    kernels["oneDNN bf16"] = onednn_bf16
    kernels["oneDNN f32"] = onednn_f32
    kernels["FBGEMM dyn int8"] = fbgemm_dynamic
    kernels["torch int8pack W8A16"] = int8pack_w8a16
    kernels["vLLM wna16 int4"] = wna16_int4
    return kernels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rows", default="1,4")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--only", default="")
    parser.add_argument("--copies", type=int, default=1)
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rows_list = [int(r) for r in args.rows.split(",")]
    weights = [torch.randn(out, inp) * 0.02 for _ in range(LAYERS) for out, inp in SHAPES]
    ceiling = read_bandwidth(args.threads)
    print(f"threads {args.threads}: plain read {ceiling:.1f} GB/s")
    results = {"threads": args.threads, "read_gb_s": ceiling, "copies": args.copies, "kernels": {}}
    probe_x = {k: torch.randn(4, k) for k in {inp for _, inp in SHAPES}}
    for name, factory in make_kernels(weights).items():
        if args.only and args.only not in name:
            continue
        try:
            built = [factory(w) for w in weights * args.copies]
        except Exception as exc:  # a kernel this build or CPU lacks
            print(f"{name:22s} unavailable: {str(exc).splitlines()[0][:90]}")
            continue
        total_bytes = sum(b for _, b, _ in built)
        dtype = built[0][2]
        # Error against float32 on the first layer's shapes.
        errors = []
        for (call, _, _), w in zip(built[:4], weights[:4], strict=True):
            x = probe_x[w.shape[1]]
            ref = x @ w.t()
            got = call(x.to(dtype)).to(torch.float32)
            errors.append(float((got - ref).norm() / ref.norm()))
        entry = {"weight_mb": total_bytes / 1e6, "rel_error": max(errors), "rows": {}}
        line = f"{name:22s} {total_bytes / 1e6:6.0f} MB err {max(errors):.4f}"
        for rows in rows_list:
            xs = {k: torch.randn(rows, k).to(dtype) for k in probe_x}
            calls = [
                (lambda c=call, x=xs[w.shape[1]]: c(x))
                for (call, _, _), w in zip(built, weights * args.copies, strict=True)
            ]
            seconds = time_step(calls, args.repeats)
            entry["rows"][rows] = {"ms": seconds * 1e3, "gb_s": total_bytes / seconds / 1e9}
            line += f" | M={rows}: {seconds * 1e3:6.2f} ms {total_bytes / seconds / 1e9:5.1f} GB/s"
        print(line, flush=True)
        results["kernels"][name] = entry
    if args.json_path:
        with open(args.json_path, "w") as handle:
            json.dump(results, handle, indent=2)


if __name__ == "__main__":
    main()
