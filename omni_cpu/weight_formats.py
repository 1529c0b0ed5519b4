"""The talker's weight formats (`--weights`), each declared once: every place reads it here.

A format is its name, the bytes a linear-layer weight takes, the CPUs its kernels run on,
how it is packed, which kernels multiply it, what the cost model charges for it and the
line the docs and the `--weights` help say about it. `envs` takes the knob's choices from
FORMATS, the planner its bytes, step overhead and the CPUs it plans it for
(omni_cpu.plan), the kernels its group and calls (omni_cpu.kernels, omni_cpu.models.linears),
the CLI its help. Adding a format is an entry here, its kernels and its tests (ARCHITECTURE.md,
"A new weight format").

Standard library only (floor 0 of ARCHITECTURE.md, beside errors, which it does not
import): `omni-cpu probe` and every stage process import it, and `envs` reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

X86 = ("x86_64", "i686")
AARCH64 = ("aarch64",)

# Library kernels a format falls back to where omni-cpu's GEMV does not take a layer.
ONEDNN = "onednn"  # vLLM's oneDNN matmul (the checkpoint's dtype)
FBGEMM = "fbgemm"  # PyTorch's FBGEMM dynamic int8 (omni_cpu.kernels.fbgemm)


@dataclass(frozen=True)
class Needs:
    """What a CPU of some architectures must state for a format's kernels to run on it."""

    architectures: tuple[str, ...]  # uname -m names (X86, AARCH64)
    isa: tuple[str, ...]  # flags (omni_cpu.hardware's names), every one needed
    words: str  # the architectures in words: "x86"

    def describe(self) -> str:
        """In words: "AVX2 and FMA on x86"."""
        flags = " and ".join(flag.upper() for flag in self.isa)
        return " on ".join(part for part in (flags, self.words) if part)


@dataclass(frozen=True)
class WeightFormat:
    """One `--weights` choice: its bytes, its kernels and where they run, its cost, its docs."""

    name: str
    # Bytes per talker linear-layer weight, scales included; None: the stage dtype's own.
    bytes_per_weight: float | None
    # ms of each talker step that is not weight streaming, at one stream, on the reference
    # machine of omni_cpu.plan.costs (its `talker_step_ms:<format>` in
    # benchmarks/calibrated.json: the one-stream step less the format's bytes a frame at
    # costs.GEMV_GB_S_PER_CORE). A class measured apart states its own (costs.CPU_CLASS_SPEEDS).
    step_overhead_ms: float
    # The call of omni-cpu's GEMV that multiplies it (`gemv-<call>`, omni_cpu.kernels.gemv).
    gemv_call: str
    # The library kernel where the GEMV does not take a layer; None: none, the format is
    # refused where the GEMV does not run.
    library_kernel: str | None
    # K elements per packed group (omni_cpu.kernels.packing); 0: not packed by group.
    group: int = 0
    # Where its kernels run, per architecture: a CPU runs it where one entry names its
    # architecture and it states that entry's flags. Empty: every CPU.
    needs_by_architecture: tuple[Needs, ...] = ()
    # Docs: a few words for the knob's line (docs/configuration.md), its packing, its kernels,
    # and where it runs, in words (docs/weights.md's row).
    short: str = ""
    packing: str = ""
    kernels: str = ""
    where: str = "everywhere"

    @property
    def quantized(self) -> bool:
        """Packed in bytes of its own, not the stage dtype's."""
        return self.bytes_per_weight is not None

    def needs_on(self, architecture: str) -> Needs | None:
        """What a CPU of `architecture` needs for its kernels; None: it has none there."""
        return next(
            (n for n in self.needs_by_architecture if architecture in n.architectures), None
        )

    def runs_on(self, architecture: str, isa: frozenset[str] | set[str] | tuple[str, ...]) -> bool:
        """Whether a CPU of `architecture` stating `isa` has a kernel for this format."""
        if not self.needs_by_architecture:
            return True
        needs = self.needs_on(architecture)
        return needs is not None and all(flag in isa for flag in needs.isa)

    def needs(self, architecture: str | None = None) -> str:
        """What a CPU needs for its kernels, in words: on `architecture` where the format
        has kernels there ("AVX2 and FMA on x86"), else on every architecture it runs on
        ("AVX2 and FMA on x86 or ASIMD on aarch64")."""
        if not self.needs_by_architecture:
            return "nothing"
        own = self.needs_on(architecture) if architecture else None
        chosen = (own,) if own else self.needs_by_architecture
        return " or ".join(n.describe() for n in chosen)

    def traffic_ratio(self, dtype_bytes: float) -> float:
        """How many times fewer bytes a weight streams than in a dtype of `dtype_bytes`."""
        return 1.0 if self.bytes_per_weight is None else dtype_bytes / self.bytes_per_weight

    def markdown_row(self) -> str:
        """docs/weights.md's row for this format."""
        size = self.packing or "the dtype's"
        name = f"`{self.name}` (default)" if self is MODEL else f"`{self.name}`"
        return f"| {name} | {size} | {self.kernels} | {self.where} |"


MODEL = WeightFormat(
    name="model",
    bytes_per_weight=None,
    step_overhead_ms=126.0,
    gemv_call="bf16",
    library_kernel=ONEDNN,
    short="checkpoint dtype",
    kernels="omni-cpu's GEMV, else oneDNN",
)
# On x86 int8 runs on the W8A8 GEMV (AVX-512 VNNI, or its AVX2 build) and else on FBGEMM,
# whose x86 engine needs AVX2 too. On aarch64 the GEMV's NEON build needs only ASIMD, the
# floor of every aarch64 server core; its dotprod and i8mm variants are chosen at run time
# where the CPU states asimddp / i8mm (kernels/build.py), so they are no requirement here.
X86_AVX2 = Needs(X86, ("avx2",), "x86")
X86_AVX2_FMA = Needs(X86, ("avx2", "fma"), "x86")
AARCH64_ASIMD = Needs(AARCH64, ("asimd",), "aarch64")
INT8 = WeightFormat(
    name="int8",
    bytes_per_weight=1.0,
    step_overhead_ms=62.0,
    gemv_call="w8a8",
    library_kernel=FBGEMM,
    needs_by_architecture=(X86_AVX2, AARCH64_ASIMD),
    short="W8A8 GEMV, else FBGEMM",
    packing="1, per-channel scales",
    kernels=(
        "omni-cpu's W8A8 GEMV (AVX-512 VNNI or AVX2; NEON: SDOT, SMMLA where stated), "
        "else FBGEMM on x86"
    ),
    where="x86 with AVX2, aarch64 with ASIMD; the plan refuses it elsewhere",
)
# Groups of 32 weights with a bf16 scale and minimum: 0.5 + 4 / 32 = 0.625 bytes. Only
# omni-cpu's W4A8 GEMV takes it (AVX-512 VNNI, or the AVX2 build: AVX2 + FMA; on aarch64
# the NEON build, ASIMD at least, as int8's).
INT4_GROUP = 32
INT4 = WeightFormat(
    name="int4",
    bytes_per_weight=0.5 + 4 / INT4_GROUP,
    step_overhead_ms=41.0,
    gemv_call="w4a8",
    library_kernel=None,
    group=INT4_GROUP,
    needs_by_architecture=(X86_AVX2_FMA, AARCH64_ASIMD),
    short="GEMV only",
    packing="0.625: groups of 32 along K with a bf16 scale and minimum each",
    kernels="omni-cpu's W4A8 GEMV (int8 activations)",
    where=(
        "x86 with AVX2 and FMA, aarch64 with ASIMD; the plan refuses it elsewhere and "
        "names what runs"
    ),
)

FORMATS: dict[str, WeightFormat] = {f.name: f for f in (MODEL, INT8, INT4)}
NAMES: tuple[str, ...] = tuple(FORMATS)


def get(name: str) -> WeightFormat:
    """The format named `name`, a value envs.WEIGHTS has read (which refuses any other)."""
    return FORMATS[name]


def knob_doc() -> str:
    """The `--weights` knob's one line (envs.WEIGHTS): each format in a few words."""
    return "talker weights: " + ", ".join(f"{f.name} ({f.short})" for f in FORMATS.values())


def runnable(architecture: str, isa: frozenset[str] | set[str] | tuple[str, ...]) -> list[str]:
    """The formats a CPU of `architecture` stating `isa` has kernels for, in FORMATS' order."""
    return [f.name for f in FORMATS.values() if f.runs_on(architecture, isa)]
