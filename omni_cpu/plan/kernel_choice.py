"""Which linear kernel at which row count: the profile's kernel settings from measured times. Pure.

`probe --calibrate` times each kernel the machine has on the code predictor's
shapes at a few row counts (omni_cpu.kernels.timing); this turns those
times into the talker's two choices its linears read (omni_cpu.kernels.gemv), as its
stage entry names them (omni_cpu.profile.choices):
- `amx_rows`, per format: the row count from which AMX tiles are no
  slower than the AVX-512 tiles at every larger measured count (0: never);
- `gemv: off` only where the library kernel beats omni-cpu's GEMV at one
  row by more than NOISE in every format measured (it has not on any machine
  measured so far, but a profile must follow the machine, not the rule).
Without measurements nothing is set, and the stage uses its built-in defaults.
"""

from __future__ import annotations

from typing import Any

NOISE = 0.10  # a library kernel must be this much faster to displace the GEMV
LIBRARY = {"bf16": "onednn", "int8": "fbgemm"}  # what the GEMV stands in for


def amx_rows(times: dict[str, dict[int, float]]) -> int:
    """Rows from which "gemv-amx" is no slower than "gemv" at every larger count; 0: never."""
    tiles, amx = times.get("gemv", {}), times.get("gemv-amx", {})
    counts = sorted(set(tiles) & set(amx))
    chosen = 0
    for count in reversed(counts):
        if amx[count] > tiles[count]:
            break
        chosen = count
    return chosen


def kernel_choices(timings: dict[str, Any] | None) -> dict[str, str]:
    """The talker's choices the measured times call for ({} without measurements)."""
    measured: dict[str, dict[str, dict[int, float]]] = (timings or {}).get("ms", {})
    env: dict[str, str] = {}
    rows = {
        fmt: amx_rows(kernels)
        for fmt, kernels in sorted(measured.items())
        if "gemv" in kernels and "gemv-amx" in kernels
    }
    if rows:
        env["amx_rows"] = ",".join(f"{fmt}={count}" for fmt, count in rows.items())
    with_gemv = [fmt for fmt, kernels in measured.items() if 1 in kernels.get("gemv", {})]

    def library_wins(fmt: str) -> bool:
        library = measured[fmt].get(LIBRARY.get(fmt, ""), {})
        return 1 in library and library[1] < (1 - NOISE) * measured[fmt]["gemv"][1]

    if with_gemv and all(library_wins(fmt) for fmt in with_gemv):
        env["gemv"] = "off"
    return env


def describe(timings: dict[str, Any] | None) -> list[str]:
    """One note per format: ms per layer at each row count, per kernel, and the choice."""
    if not timings or not timings.get("ms"):
        return []
    env = kernel_choices(timings)
    notes = []
    for fmt, kernels in sorted(timings["ms"].items()):
        shown = "; ".join(
            f"{kernel} " + " ".join(f"M{rows}={ms:g}" for rows, ms in sorted(by_rows.items()))
            for kernel, by_rows in sorted(kernels.items())
        )
        notes.append(
            f"kernels measured here ({fmt}, ms per code-predictor layer on "
            f"{timings.get('threads', '?')} threads): {shown}"
        )
    if env:
        notes.append("kernel choice: " + ", ".join(f"{k}={v}" for k, v in sorted(env.items())))
    return notes
