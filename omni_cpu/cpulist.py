"""The kernel's CPU list syntax (`0-5,48-53`, `0-62:2`), parsed and printed.

Used for sysfs lists, cgroup cpusets, profiles and `VLLM_CPU_OMP_THREADS_BIND`.
"""

from collections.abc import Iterable

from omni_cpu.errors import CpuListError

# Linux builds support at most 8192 CPUs (x86 MAXSMP); far larger ids are typos, and
# expanding `0-9999999999` would hang the caller.
MAX_CPU_ID = 1 << 16


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """Parse `0-3,8,10-14:2` into sorted unique CPU ids. Empty text is no CPUs."""
    cpus: set[int] = set()
    text = text.strip()
    if not text:
        return ()
    for part in text.split(","):
        part = part.strip()
        if not part:
            raise CpuListError(f"empty item in CPU list {text!r}", "write e.g. 0-3,8")
        range_text, _, stride_text = part.partition(":")
        first_text, dash, last_text = range_text.partition("-")
        try:
            first = int(first_text)
            last = int(last_text) if dash else first
            stride = int(stride_text) if stride_text else 1
        except ValueError:
            raise CpuListError(
                f"{part!r} in CPU list {text!r} is not a CPU id or range", "write e.g. 0-3,8"
            ) from None
        if last >= MAX_CPU_ID:
            raise CpuListError(
                f"CPU id {last} in {text!r} is beyond any machine (max {MAX_CPU_ID - 1})"
            )
        if first < 0 or last < first or stride < 1 or (stride_text and not dash):
            raise CpuListError(f"bad range {part!r} in CPU list {text!r}", "write e.g. 0-3,8")
        cpus.update(range(first, last + 1, stride))
    return tuple(sorted(cpus))


def format_cpu_list(cpus: Iterable[int]) -> str:
    """Print CPU ids in the kernel's shortest range form: `0-5,48-53`."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    start = prev = None
    for cpu in ordered:
        if start is None:
            start = prev = cpu
        elif cpu == prev + 1:
            prev = cpu
        else:
            parts.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = prev = cpu
    if start is not None:
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
    return ",".join(parts)
