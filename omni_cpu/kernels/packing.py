"""Weights quantized and laid out for the GEMV modules: plain tensors in, plain tensors out.

The layout: output columns go into the vector lanes, in blocks of BLOCK columns that are
each one sequential stream (the hardware prefetcher follows it), `group` consecutive K
elements to a lane (vdpbf16ps takes pairs, vpdpbusd quads). The kernels' register tiles
need no horizontal sums on it, so a few rows of x cost what one does; every module (AVX-512
and AVX2) reads the same blocks, and a block's [K / group][64][group] is already AMX's B
operand. Why this layout and not K in the lanes: benchmarks/RESULTS.md, "The GEMV: output
columns in the lanes".

int8 is W8A8: per-output-row symmetric weight scales, activations quantized per row inside
the call. int4 is W4A8: groups of INT4_GROUP K elements per output row, each with a bf16
scale and minimum (w = scale * code + minimum, codes 0..15, 0.625 bytes a weight).
"""

from __future__ import annotations

import torch

from omni_cpu import weight_formats

LANES = 16  # output columns per vector: N must be a multiple (kLanes in the C++)
BLOCK = 64  # output columns per packed block (kBlock in kernel_common.h)
BF16_GROUP = 2  # K elements per lane per multiply-add: vdpbf16ps takes pairs
INT8_GROUP = 4  # vpdpbusd takes quads
INT4_GROUP = weight_formats.INT4.group  # K elements per (scale, minimum) (kInt4Group)
INT4_REFITS = 2  # least-squares refits of each group's scale and minimum
# Rows of a weight quantized at once: the float32 temporaries of a whole 6144 x 1024 matrix
# are ~100 MB, of a slice ~4 MB, and a load's peak memory is what they add.
QUANTIZE_ROWS = 256


def fits(weight: torch.Tensor, group: int) -> bool:
    """Shapes the kernels take: 2-D, N a multiple of LANES, K of `group` elements."""
    return (
        weight.ndim == 2
        and not weight.is_meta
        and weight.shape[0] % LANES == 0
        and weight.shape[1] % group == 0
    )


def pack(weight: torch.Tensor, group: int) -> torch.Tensor:
    """[N, K] -> the kernels' layout: blocks of BLOCK columns, each [K / group][width][group].

    The last block holds the N % BLOCK columns left over (16, 32 or 48).
    """
    n, k = weight.shape
    full = n // BLOCK * BLOCK

    def blocks(part: torch.Tensor, width: int) -> torch.Tensor:
        rows = part.shape[0]
        return part.reshape(rows // width, width, k // group, group).permute(0, 2, 1, 3)

    packed = blocks(weight[:full], BLOCK).reshape(-1)
    if full < n:
        packed = torch.cat([packed, blocks(weight[full:], n - full).reshape(-1)])
    return packed.contiguous().reshape(n, k)


def pack_bf16(weight: torch.Tensor) -> dict[str, torch.Tensor]:
    """A [N, K] weight in bf16, packed: {"packed"}."""
    return {"packed": pack(weight.detach().to(torch.bfloat16), BF16_GROUP)}


def pack_int8(weight: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-row symmetric int8 of a [N, K] weight, packed: {"packed", "scales", "row_sums"}.

    `row_sums` (each row's sum of codes) lets the AVX-512 kernel shift x to unsigned 8 bits.
    """
    n = int(weight.shape[0])
    quantized = torch.empty(weight.shape, dtype=torch.int8)
    scales = torch.empty(n, dtype=torch.float32)
    for start in range(0, n, QUANTIZE_ROWS):
        rows = weight[start : start + QUANTIZE_ROWS].detach().to(torch.float32, copy=True)
        scale = (rows.abs().amax(dim=1) / 127.0).clamp(min=1e-12)
        scales[start : start + QUANTIZE_ROWS] = scale
        quantized[start : start + QUANTIZE_ROWS] = (
            rows.div_(scale[:, None]).round_().clamp_(-127, 127).to(torch.int8)
        )
    row_sums = quantized.sum(dim=1, dtype=torch.int32)
    return {"packed": pack(quantized, INT8_GROUP), "scales": scales, "row_sums": row_sums}


def quantize_int4(groups: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """float32 [..., INT4_GROUP] -> (codes uint8 0..15, scale, minimum), w ~ scale * code + minimum.

    Asymmetric per group: start from the group's min and max (15 steps between), then
    refit scale and minimum by least squares to the codes they gave, INT4_REFITS times.
    Scale and minimum are rounded to bf16 (what the kernel stores) before the codes are
    taken, so that rounding costs nothing. Modifies nothing it is given.
    """
    n = groups.shape[-1]
    low = groups.amin(dim=-1, keepdim=True)
    scale = ((groups.amax(dim=-1, keepdim=True) - low) / 15.0).clamp_(min=1e-12)

    def codes_for(scale: torch.Tensor, low: torch.Tensor) -> torch.Tensor:
        return (groups - low).div_(scale).round_().clamp_(0, 15)

    for refit in range(INT4_REFITS + 1):
        scale = scale.to(torch.bfloat16).float().clamp_(min=1e-12)
        low = low.to(torch.bfloat16).float()
        codes = codes_for(scale, low)
        if refit == INT4_REFITS:
            break
        sum_c, sum_cc = codes.sum(-1, keepdim=True), (codes * codes).sum(-1, keepdim=True)
        sum_w, sum_cw = groups.sum(-1, keepdim=True), (codes * groups).sum(-1, keepdim=True)
        det = n * sum_cc - sum_c * sum_c
        fitted = (n * sum_cw - sum_c * sum_w) / det.clamp(min=1e-30)
        ok = (det > 0.5) & (fitted > 0)  # all codes equal: keep min/max
        scale = torch.where(ok, fitted, scale)
        low = torch.where(ok, (sum_w - fitted * sum_c) / n, low)
    return codes.to(torch.uint8), scale.squeeze(-1), low.squeeze(-1)


def pack_int4(weight: torch.Tensor) -> dict[str, torch.Tensor]:
    """Group-wise asymmetric int4 of a [N, K] weight, packed: {"packed", "scales"}.

    `packed` is [K / 8][width][4 bytes] per block, byte j of each 8-element step holding
    element j in its low nibble and element 4 + j in its high one; `scales` is
    [K / 32][width][2] bf16 (scale, minimum) per block.
    """
    n, k = (int(d) for d in weight.shape)
    groups = k // INT4_GROUP
    nibbles = torch.empty(n, k // 2, dtype=torch.uint8)
    pairs = torch.empty(n, groups, 2, dtype=torch.bfloat16)  # (scale, minimum)
    for start in range(0, n, QUANTIZE_ROWS):
        rows = weight[start : start + QUANTIZE_ROWS].detach().to(torch.float32, copy=True)
        codes, scale, low = quantize_int4(rows.reshape(rows.shape[0], groups, INT4_GROUP))
        pairs[start : start + QUANTIZE_ROWS, :, 0] = scale
        pairs[start : start + QUANTIZE_ROWS, :, 1] = low
        steps = codes.reshape(rows.shape[0], k // 8, 2, 4)
        nibbles[start : start + QUANTIZE_ROWS] = (steps[:, :, 0] | (steps[:, :, 1] << 4)).reshape(
            rows.shape[0], k // 2
        )
    return {"packed": pack(nibbles, 4), "scales": pack(pairs.reshape(n, groups * 2), 2)}
