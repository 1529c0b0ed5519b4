"""The Arm kernels' cases: inputs packed by omni_cpu/kernels/packing.py, the references and bounds
of the x86 kernel tests, written to a folder for tests/kernels/arm/harness.cpp to read.

The same packing.py calls as the x86 modules' tests (pack_bf16, pack_int8, pack_int4), so a
case passing under qemu-aarch64 says the NEON kernels read the layout Python packs for every
ISA. Each case is a line of cases.txt ("<kernel> <name> <mode> <bound> key=value...") and raw
little-endian arrays <name>.<array>; the reference is float64 ("want").

Imports torch: only modules that `importorskip` it first import it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

from omni_cpu.kernels import packing
from tests.helpers.attention import one_position_case
from tests.helpers.tensors import weight

# The bounds of the x86 tests (tests/kernels/test_gemv_avx2.py, test_int4.py,
# test_decode_attention.py, test_snake.py), by the same names.
BF16_BOUND = 0.01
W8A8_BOUND = 0.03
INT4_BOUND = 0.08  # against the original weight: int4's own rounding
KERNEL_BOUND = 0.015  # W4A8 against the dequantized weight: the kernel's arithmetic
KERNEL_BOUND_BF16_OUT = 0.02  # ... with a bf16 output's rounding on top
ATTENTION_BOUNDS = {torch.float32: 1e-5, torch.bfloat16: 0.01}
SNAKE_FLOAT32_ABS = 2e-6
SINE_ABS = 3e-7


@dataclass
class Case:
    """One kernel call: its line's fields and its arrays (the reference among them)."""

    kernel: str
    name: str
    mode: str  # rel: ||got - want|| / ||want||; abs: max |got - want|; elem: allclose
    bound: float
    params: dict[str, object] = field(default_factory=dict)
    arrays: dict[str, torch.Tensor] = field(default_factory=dict)

    def line(self) -> str:
        pairs = " ".join(f"{key}={value}" for key, value in self.params.items())
        return f"{self.kernel} {self.name} {self.mode} {self.bound!r} {pairs}".rstrip()


def _raw(tensor: torch.Tensor) -> bytes:
    tensor = tensor.contiguous()
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.view(torch.int16)
    return tensor.numpy().tobytes()


def write(cases: list[Case], folder: Path) -> None:
    """cases.txt and every case's arrays into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    for case in cases:
        for name, array in case.arrays.items():
            (folder / f"{case.name}.{name}").write_bytes(_raw(array))
    (folder / "cases.txt").write_text("".join(case.line() + "\n" for case in cases))


# Which case packed a weight first, by kernel and the weight's id (all_cases empties it).
_packed_by: dict[tuple[str, int], str] = {}
_kept: list[torch.Tensor] = []


def _dtype_name(dtype: torch.dtype) -> str:
    return "bf16" if dtype == torch.bfloat16 else "f32"


def dequantized(w: torch.Tensor) -> torch.Tensor:
    """The float32 weight the int4 codes stand for (test_int4.py's reference)."""
    n, k = w.shape
    codes, scale, low = packing.quantize_int4(w.reshape(n, k // packing.INT4_GROUP, 32))
    return (codes.float() * scale[..., None] + low[..., None]).reshape(n, k)


def _product(
    kernel: str,
    name: str,
    w: torch.Tensor,
    x: torch.Tensor,
    want: torch.Tensor,
    bound: float,
    *,
    bias: torch.Tensor | None = None,
    out: torch.dtype = torch.float32,
    mode: str = "rel",
    atol: float | None = None,
) -> Case:
    """A GEMV case: `w` [N, K] float32 packed for `kernel`, x [M, K] in the dtype it is given."""
    n, k = w.shape
    m = x.shape[0]
    arrays: dict[str, torch.Tensor] = {"want": want.double()}
    arrays["x"] = x.float() if kernel == "bf16" else x  # gemv_bf16 widens x to float32
    params: dict[str, object] = {}
    owner = _packed_by.get((kernel, id(w)))
    if owner is not None:  # the same weight as an earlier case: read its packed files
        params["weights"] = owner
    elif kernel == "bf16":
        arrays["w"] = packing.pack_bf16(w)["packed"]
    elif kernel == "w8a8":
        packed = packing.pack_int8(w)
        arrays |= {"w": packed["packed"], "wscale": packed["scales"]}
    else:
        packed = packing.pack_int4(w)
        arrays |= {"w": packed["packed"], "scales": packed["scales"]}
    if owner is None:
        _packed_by[(kernel, id(w))] = name
        _kept.append(w)  # id(w) stays this weight's while the cases are built
    if bias is not None:
        arrays["bias"] = bias.float()
    params |= {
        "M": m,
        "K": k,
        "N": n,
        "in": _dtype_name(x.dtype),
        "out": _dtype_name(out),
        "bias": int(bias is not None),
    }
    if atol is not None:
        params["atol"] = atol
    return Case(kernel, name, mode, bound, params, arrays)


def gemv_cases() -> Iterator[Case]:
    """bf16, W8A8 and W4A8 as the x86 tests hold them."""
    # Two of the 0.6B's layer shapes (square, down) and 1-7 rows: the real shapes' bounds.
    for n, k in [(1024, 1024), (1024, 3072)]:
        w = weight(n, k)
        wd, wb = dequantized(w), w.to(torch.bfloat16).float()
        for rows in (1, 3, 7):
            x = torch.randn(rows, k, generator=torch.Generator().manual_seed(rows))
            want = x @ w.t()
            tag = f"{n}x{k}-M{rows}"
            xb = x.to(torch.bfloat16)
            yield _product(
                "bf16",
                f"bf16-real-{tag}",
                wb,
                xb,
                want,
                BF16_BOUND,
                out=torch.bfloat16,
            )
            yield _product("w8a8", f"w8a8-real-{tag}", w, x, want, W8A8_BOUND)
            yield _product("w4a8", f"w4a8-real-{tag}", w, x, x @ wd.t(), KERNEL_BOUND)
            yield _product("w4a8", f"int4-rounding-{tag}", w, x, want, INT4_BOUND)
    # Partial column blocks (16, 48, 208 = 3 x 64 + 16), a bias, both dtypes in and out.
    for columns in (16, 48, 208, 256):
        w, bias = weight(columns, 192, seed=columns), torch.randn(columns) * 0.1
        wd, wb = dequantized(w), w.to(torch.bfloat16).float()
        for rows in (1, 2, 6):
            x = torch.randn(rows, 192, generator=torch.Generator().manual_seed(rows))
            want = torch.nn.functional.linear(x, w, bias)
            for dtype in (torch.bfloat16, torch.float32):
                tag = f"N{columns}-M{rows}-{_dtype_name(dtype)}"
                xd, bd = x.to(dtype), bias.to(dtype)
                yield _product(
                    "bf16",
                    f"bf16-partial-{tag}",
                    wb,
                    xd,
                    want,
                    BF16_BOUND,
                    bias=bd,
                    out=dtype,
                )
                yield _product(
                    "w8a8", f"w8a8-partial-{tag}", w, xd, want, W8A8_BOUND, bias=bd, out=dtype
                )
                bound = KERNEL_BOUND if dtype == torch.float32 else KERNEL_BOUND_BF16_OUT
                want4 = torch.nn.functional.linear(x, wd, bias)
                yield _product(
                    "w4a8", f"w4a8-partial-{tag}", w, xd, want4, bound, bias=bd, out=dtype
                )
    # A one-hot weight per column: a permuted column, nibble or block shows as a wrong column.
    w = torch.zeros(208, 192)
    picked = (torch.arange(208) * 5) % 192
    w[torch.arange(208), picked] = 1.0
    x = torch.arange(3 * 192, dtype=torch.float32).reshape(3, 192) % 97
    want = x[:, picked]
    for kernel, dtype in (
        ("bf16", torch.bfloat16),
        ("w8a8", torch.float32),
        ("w4a8", torch.float32),
    ):
        yield _product(
            kernel,
            f"{kernel}-columns",
            w,
            x.to(dtype),
            want,
            0.01,
            out=dtype,
            mode="elem",
            atol=0.5,
        )
    # All weights and activations at +-127: every product +1, y = 256; a saturating sum clips.
    w = torch.full((64, 256), 1.0)
    w[:, 1::2] = -1.0
    x = torch.ones(1, 256)
    x[:, 1::2] = -1.0
    yield _product(
        "w8a8", "w8a8-extreme-codes", w, x, torch.full((1, 64), 256.0), 1e-4, mode="elem", atol=0.0
    )


def attention_cases() -> Iterator[Case]:
    """test_decode_attention.py's grid: float32 to 1e-5, bf16 to 1 %, against float32 SDPA."""
    for dtype, bound in ATTENTION_BOUNDS.items():
        for bsz, heads, groups in [(1, 16, 8), (3, 4, 4), (2, 6, 2)]:
            for end in (1, 2, 9, 17):
                case = one_position_case(dtype, bsz, heads, groups, end)
                _, kv_groups, cached, dim = case.keys.shape
                yield Case(
                    "attention",
                    f"attention-{_dtype_name(dtype)}-B{bsz}-H{heads}-G{groups}-end{end}",
                    "rel",
                    bound,
                    {
                        "B": bsz,
                        "H": heads,
                        "G": kv_groups,
                        "S": cached,
                        "D": dim,
                        "end": end,
                        "scale": repr(case.scale),
                        "in": _dtype_name(dtype),
                    },
                    {
                        "q": case.q,
                        "keys": case.keys,
                        "values": case.values,
                        "want": case.want().double(),
                    },
                )


def _snake_formula(x: torch.Tensor, alpha: torch.Tensor, inv_beta: torch.Tensor) -> torch.Tensor:
    x = x.double()
    product = (x.float() * alpha.float()).double()  # alpha * x as float32 rounds it
    return x + inv_beta.double() * torch.sin(product) ** 2


def snake_cases() -> Iterator[Case]:
    """test_snake.py's: float32 to 2e-6 absolute, bf16 to half an ulp, the tail kept as is."""
    for dtype in (torch.float32, torch.bfloat16):
        for channels in (96, 20, 3):  # whole vectors; a remainder; fewer than one
            for keep in (0, 6):
                generator = torch.Generator().manual_seed(channels + keep)
                x = (torch.randn(2, 37, channels, generator=generator) * 3).to(dtype)
                alpha = torch.rand(channels, generator=generator) * 3 + 0.1
                inv_beta = torch.rand(channels, generator=generator) + 0.1
                arrays = {
                    "x": x,
                    "alpha": alpha,
                    "inv_beta": inv_beta,
                    "want": _snake_formula(x, alpha, inv_beta),
                }
                if keep:
                    arrays["tail"] = torch.randn(2, keep, channels, generator=generator).to(dtype)
                params: dict[str, object] = {
                    "B": 2,
                    "L": 37,
                    "C": channels,
                    "keep": keep,
                    "in": _dtype_name(dtype),
                }
                name = f"snake-{_dtype_name(dtype)}-C{channels}-keep{keep}"
                if dtype == torch.float32:
                    yield Case("snake", name, "abs", SNAKE_FLOAT32_ABS, params, arrays)
                else:  # |error| <= |want| 2^-8: the result's own rounding
                    yield Case("snake", name, "elem", 2**-8, params | {"atol": 1e-30}, arrays)
    # The sine over |alpha x| <= 1e4: x in [-1, 1], alpha 1e4, inv_beta 1.
    x = torch.linspace(-1, 1, 200_003).view(1, -1, 1)
    alpha, inv_beta = torch.full((1,), 1e4), torch.ones(1)
    want = x.double() + torch.sin((x * alpha).double()) ** 2
    yield Case(
        "snake",
        "snake-sine-wide-range",
        "abs",
        SINE_ABS,
        {"B": 1, "L": x.shape[1], "C": 1, "keep": 0, "in": "f32"},
        {"x": x, "alpha": alpha, "inv_beta": inv_beta, "want": want},
    )


def all_cases() -> list[Case]:
    try:
        return [*gemv_cases(), *attention_cases(), *snake_cases()]
    finally:
        _packed_by.clear()
        _kept.clear()
