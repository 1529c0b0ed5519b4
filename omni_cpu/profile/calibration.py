"""What `probe --calibrate` measured on a machine: kept in a profile's machine block.

Plain numbers, JSON-ready. The bench room measures them (omni_cpu.bench.calibrate),
the profile carries them (omni_cpu.profile.writer), the cost model reads them
(omni_cpu.plan.speed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Calibration:
    """What `probe --calibrate` measured on this machine (plain numbers, JSON-ready)."""

    # Cores -> GB/s that a bandwidth-bound matrix-vector product streams weights at.
    bandwidth_gb_s: dict[int, float] = field(default_factory=dict)
    # dtype -> ms of one core per decoded code2wav frame.
    code2wav_ms_per_frame: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0  # how long the measurement took
    # dtype -> ms of one core per code2wav decoder call beyond its frames.
    code2wav_ms_per_call: dict[str, float] = field(default_factory=dict)
    # µs per call of the small torch ops a talker step is made of, one thread (0: not measured).
    small_op_us: float = 0.0
    # omni_cpu.kernels.timing: {"threads", "ms": {format: {kernel: {rows: ms}}}};
    # omni_cpu.plan.kernel_choice turns it into the profile's kernel settings.
    kernels: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "bandwidth_gb_s": {str(k): v for k, v in sorted(self.bandwidth_gb_s.items())},
            "code2wav_ms_per_frame": dict(sorted(self.code2wav_ms_per_frame.items())),
            "seconds": self.seconds,
            **({"kernels": _kernel_times(self.kernels)} if self.kernels.get("ms") else {}),
        }
        # Written only when measured, so profiles calibrated before them read back the same.
        if self.code2wav_ms_per_call:
            data["code2wav_ms_per_call"] = dict(sorted(self.code2wav_ms_per_call.items()))
        if self.small_op_us:
            data["small_op_us"] = self.small_op_us
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Calibration:
        def per_dtype(key: str) -> dict[str, float]:
            return {str(k): float(v) for k, v in data.get(key, {}).items()}

        return cls(
            bandwidth_gb_s={int(k): float(v) for k, v in data.get("bandwidth_gb_s", {}).items()},
            code2wav_ms_per_frame=per_dtype("code2wav_ms_per_frame"),
            seconds=float(data.get("seconds", 0.0)),
            code2wav_ms_per_call=per_dtype("code2wav_ms_per_call"),
            small_op_us=float(data.get("small_op_us", 0.0)),
            kernels=_kernel_times(data.get("kernels") or {}),
        )

    def bandwidth(self, cores: int) -> float | None:
        """GB/s on `cores` cores: the nearest measured core count at or below it."""
        measured = [n for n in self.bandwidth_gb_s if n <= cores]
        return self.bandwidth_gb_s[max(measured)] if measured else None


def _kernel_times(data: dict[str, Any]) -> dict[str, Any]:
    """Kernel times with int row counts and float ms (YAML/JSON keys arrive as text)."""
    if not data.get("ms"):
        return {}
    return {
        "threads": int(data.get("threads", 0)),
        "ms": {
            str(fmt): {
                str(kernel): {int(rows): float(ms) for rows, ms in by_rows.items()}
                for kernel, by_rows in kernels.items()
            }
            for fmt, kernels in data.get("ms", {}).items()
        },
    }
