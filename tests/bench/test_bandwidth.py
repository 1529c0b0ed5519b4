"""The triad and the weight-streaming share, on arrays small enough for a test."""

from __future__ import annotations

import math
import os

import pytest

from omni_cpu.bench.bandwidth import Triad, stage_read, triad_bandwidth, weight_streaming


def test_triad_returns_a_positive_finite_bandwidth() -> None:
    triad = triad_bandwidth(array_bytes=1 << 20, repeats=2, threads=2)
    assert triad.bytes_per_s > 0 and math.isfinite(triad.bytes_per_s)
    assert triad.threads == 2


def test_triad_refuses_an_empty_array() -> None:
    with pytest.raises(ValueError):
        triad_bandwidth(array_bytes=0)


def test_weight_streaming_is_weight_bytes_per_frame_time_over_the_triad() -> None:
    triad = Triad(bytes_per_s=40e9, array_bytes=1, threads=1, repeats=1)
    share = weight_streaming(2_000_000_000, 100.0, triad)  # 2 GB per 100 ms = 20 GB/s
    assert share["bytes_per_s"] == 20_000_000_000
    assert share["fraction_of_triad"] == 0.5


def test_weight_streaming_without_a_frame_time_has_no_fraction() -> None:
    triad = Triad(bytes_per_s=40e9, array_bytes=1, threads=1, repeats=1)
    assert weight_streaming(1, None, triad)["fraction_of_triad"] is None


def test_weight_streaming_is_also_a_share_of_the_stage_cores_read_rate() -> None:
    triad = Triad(bytes_per_s=40e9, array_bytes=1, threads=1, repeats=1)
    share = weight_streaming(2_000_000_000, 100.0, triad, stage_read_bytes_per_s=25e9)
    assert share["fraction_of_stage_read"] == 0.8


def test_stage_read_measures_on_the_given_cpus() -> None:
    pytest.importorskip("torch", reason="the read is a torch sum (the runtime)")
    cpu = sorted(os.sched_getaffinity(0))[0]
    read = stage_read([cpu], read_bytes=32 << 20)
    assert read is not None and read["threads"] == 1 and read["cpus"] == str(cpu)
    assert 1e8 < read["bytes_per_s"] < 1e13  # a real rate, not a unit slip
