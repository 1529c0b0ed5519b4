"""Memory bandwidth: a STREAM-like triad, the read rate of the talker stage's own cores,
and the talker's weight streaming as a share of each.

The ceiling that matters to a batch-1 talker step is how fast the stage's own
cores can *read* (a GEMV reads its weights once and writes almost nothing); the
2-thread triad of the whole box is the machine's, not the stage's. `stage_read`
measures a plain sum over 512 MB with the stage's CPUs and thread count, in a
child process so the affinity and thread settings stay out of the bench driver.

numpy's `a = b + s*c` is run as two passes over preallocated arrays
(`a = s*c`, then `a += b`): five array sweeps (read c, write a, read a, read b,
write a) per iteration, and those are the bytes counted. One thread per slice,
since numpy releases the GIL in large element-wise loops and one core alone
cannot draw the machine's bandwidth.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

SWEEPS_PER_TRIAD = 5  # see the module docstring
DEFAULT_ARRAY_BYTES = 256 << 20  # per array: far beyond any last-level cache we plan for


@dataclass(frozen=True)
class Triad:
    """The best triad pass: bytes/s, with how it was taken."""

    bytes_per_s: float
    array_bytes: int
    threads: int
    repeats: int

    def to_dict(self) -> dict[str, float | int | str]:
        return {
            "bytes_per_s": round(self.bytes_per_s),
            "gb_per_s": round(self.bytes_per_s / 1e9, 2),
            "array_bytes": self.array_bytes,
            "threads": self.threads,
            "repeats": self.repeats,
            "method": "numpy a=s*c; a+=b, float64, best of repeats, 5 sweeps counted",
        }


def triad_bandwidth(
    array_bytes: int = DEFAULT_ARRAY_BYTES, repeats: int = 5, threads: int | None = None
) -> Triad:
    """Best-of-`repeats` triad bandwidth over three float64 arrays of `array_bytes` each."""
    import numpy as np

    if array_bytes < 8 or repeats < 1:
        raise ValueError("the triad needs at least one element and one repeat")
    threads = threads or len(os.sched_getaffinity(0))
    elements = array_bytes // 8
    a = np.empty(elements)
    b = np.full(elements, 1.0)
    c = np.full(elements, 2.0)
    scalar = 3.0
    step = math.ceil(elements / threads)
    slices = [slice(start, min(start + step, elements)) for start in range(0, elements, step)]

    def triad(part: slice) -> None:
        np.multiply(c[part], scalar, out=a[part])
        np.add(a[part], b[part], out=a[part])

    best = math.inf
    with ThreadPoolExecutor(max_workers=len(slices)) as pool:
        for part in slices:  # first touch: fault the pages in before timing
            a[part] = 0.0
        for _ in range(repeats):
            start = time.perf_counter()
            list(pool.map(triad, slices))
            best = min(best, time.perf_counter() - start)
    moved = SWEEPS_PER_TRIAD * elements * 8
    return Triad(moved / best, elements * 8, len(slices), repeats)


READ_BYTES = 512 << 20
_READ_CHILD = """
import json, os, sys, time
import torch
cpus = [int(c) for c in sys.argv[1].split(",")]
os.sched_setaffinity(0, cpus)
torch.set_num_threads(len(cpus))
data = torch.ones(int(sys.argv[2]) // 4, dtype=torch.float32)
data.sum()
best = min((lambda t: (data.sum(), time.perf_counter() - t)[1])(time.perf_counter())
           for _ in range(7))
print(json.dumps({"bytes_per_s": data.numel() * 4 / best}))
"""


def stage_read(cpus: list[int], read_bytes: int = READ_BYTES) -> dict[str, Any] | None:
    """Best-of-7 read rate of a 512 MB sum on `cpus` with one thread each; None if it fails."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", _READ_CHILD, ",".join(map(str, cpus)), str(read_bytes)],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        rate = float(json.loads(done.stdout.strip().splitlines()[-1])["bytes_per_s"])
    except (OSError, ValueError, KeyError, IndexError, subprocess.SubprocessError):
        return None
    return {
        "bytes_per_s": round(rate),
        "gb_per_s": round(rate / 1e9, 2),
        "cpus": ",".join(map(str, cpus)),
        "threads": len(cpus),
        "method": "torch float32 sum over 512 MB on the talker's CPUs, its thread count, best of 7",
    }


def weight_streaming(
    talker_weight_bytes: int,
    talker_ms_per_frame: float | None,
    triad: Triad,
    stage_read_bytes_per_s: float | None = None,
) -> dict[str, float | int | str | None]:
    """The talker stage's weight bytes per second at batch 1, and its share of the triad's.

    One frame is one talker step plus the code predictor's 15 steps;
    `talker_weight_bytes` is what that frame streams (the footprint's
    `streamed_bytes_per_frame`: the talker's matrices once, the predictor's 15 times).
    """
    rate = None
    if talker_ms_per_frame:
        rate = talker_weight_bytes / (talker_ms_per_frame / 1000)
    return {
        "talker_weight_bytes": talker_weight_bytes,
        "talker_ms_per_frame": talker_ms_per_frame,
        "bytes_per_s": None if rate is None else round(rate),
        "fraction_of_triad": None if rate is None else round(rate / triad.bytes_per_s, 3),
        "fraction_of_stage_read": (
            None
            if rate is None or not stage_read_bytes_per_s
            else round(rate / stage_read_bytes_per_s, 3)
        ),
        "method": "weight bytes one frame streams (talker matrices once, code predictor's "
        "15 times, in the stage's weight format) / talker step ms at concurrency 1",
    }
