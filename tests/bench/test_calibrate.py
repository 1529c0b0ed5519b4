"""`probe --calibrate`'s measurements that need no engine: run for real, on this machine."""

from __future__ import annotations

import pytest

from omni_cpu.bench.calibrate import SMALL_OP_SECONDS, _small_op_us, core_counts

torch = pytest.importorskip("torch")


def test_small_op_time_is_a_few_microseconds_per_call():
    torch.set_num_threads(1)
    # A talker step's small torch calls take microseconds, never nothing and never a frame.
    assert 0.1 < _small_op_us(torch) < 1000


def test_small_ops_fit_in_their_share_of_the_budget():
    import time

    begin = time.perf_counter()
    _small_op_us(torch)
    assert time.perf_counter() - begin < SMALL_OP_SECONDS + 0.5


def test_core_counts_double_up_to_the_machine():
    assert core_counts(1) == [1]
    assert core_counts(6) == [1, 2, 4, 6]
    assert core_counts(64)[-1] == 64 and len(core_counts(64)) <= 6
