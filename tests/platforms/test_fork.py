"""A stage forked from the driver binds its OpenMP threads to its own CPUs, as a spawned one.

Real processes: a driver with Intel OpenMP preloaded (what omni_cpu.launch.relaunch
gives it) that has used OpenMP itself, and one stage process forked from it
(omni_cpu.platform.fork) with a stage's binding environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from omni_cpu.cpulist import parse_cpu_list
from omni_cpu.hardware.preload import INTEL_OPENMP, find_library

pytest.importorskip("vllm_omni", reason="the inference runtime is not installed")
REPO = Path(__file__).resolve().parents[2]
IOMP = find_library(INTEL_OPENMP)


@pytest.fixture(scope="module")
def forked_stage() -> dict:
    if IOMP is None:
        pytest.skip("Intel OpenMP (libiomp5) is not installed: stages are spawned")
    cpu = max(os.sched_getaffinity(0))  # not the CPU every thread may use by default
    env = {**os.environ, "PYTHONPATH": str(REPO), "LD_PRELOAD": IOMP}
    done = subprocess.run(
        [sys.executable, "-m", "tests.platforms.fork_driver", str(cpu)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_forked_stage_pins_its_openmp_threads_to_its_own_cpus(forked_stage: dict) -> None:
    cpu = forked_stage["cpu"]
    masks = [set(parse_cpu_list(text)) for text in forked_stage["threads"].values()]
    everything = set(os.sched_getaffinity(0))
    # One OpenMP thread per listed CPU, pinned there; other threads keep the whole mask.
    assert forked_stage["torch_threads"] == 1
    assert {cpu} in masks
    assert all(mask in (everything, {cpu}) for mask in masks), masks


def test_a_forked_stage_starts_with_pythons_own_ctrl_c_handler(forked_stage: dict) -> None:
    assert forked_stage["default_sigint"]
