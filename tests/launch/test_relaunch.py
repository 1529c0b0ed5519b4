"""When the stages can be forked from the driver, and the one re-execution that lets them.

Real profiles (profiles/zen5-kvm-2core.yaml) with the LD_PRELOAD a probe writes, and a
real re-execution of a Python process.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from omni_cpu.hardware.preload import INTEL_OPENMP, TCMALLOC, find_library
from omni_cpu.launch.plan import LaunchPlan
from omni_cpu.launch.relaunch import fork_blocker
from omni_cpu.profile import deploy_config_dict, load_profile

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "profiles" / "zen5-kvm-2core.yaml"
IOMP = find_library(INTEL_OPENMP)
needs_iomp = pytest.mark.skipif(IOMP is None, reason="Intel OpenMP (libiomp5) is not installed")


def plan_preloading(preload: str | None) -> LaunchPlan:
    # As start binds it: the library found in the runtime that runs (omni_cpu.plan.bind).
    paths = (preload,) if preload is not None else ()
    profile = dataclasses.replace(load_profile(PROFILE), preload_paths=paths)
    return LaunchPlan("m", profile, str(PROFILE), 0, deploy_config_dict(profile, 0), ())


@needs_iomp
def test_stages_preloading_intel_openmp_fork_once_the_driver_runs_with_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OMNI_CPU_STAGE_START", raising=False)
    plan = plan_preloading(IOMP)
    assert fork_blocker(plan, this_process=False) is None
    if os.path.realpath(str(IOMP)) not in Path("/proc/self/maps").read_text():
        assert "without the stages' LD_PRELOAD" in (fork_blocker(plan) or "")


def test_stages_on_gnu_openmp_are_spawned(monkeypatch: pytest.MonkeyPatch) -> None:
    # GNU OpenMP reads its binding once, as it loads in the driver: a forked stage
    # could not bind its threads to its own CPUs.
    monkeypatch.delenv("OMNI_CPU_STAGE_START", raising=False)
    tcmalloc = find_library(TCMALLOC) or "/usr/lib/libtcmalloc_minimal.so.4"
    assert "Intel OpenMP" in (fork_blocker(plan_preloading(tcmalloc), this_process=False) or "")
    assert "Intel OpenMP" in (fork_blocker(plan_preloading(None), this_process=False) or "")


@needs_iomp
def test_spawn_can_be_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMNI_CPU_STAGE_START", "spawn")
    assert fork_blocker(plan_preloading(IOMP), this_process=False) == "OMNI_CPU_STAGE_START=spawn"


RELAUNCHED = """
import dataclasses, json, os, sys
sys.path.insert(0, {repo!r})
from tests.launch.test_relaunch import plan_preloading
from omni_cpu.launch import relaunch
from omni_cpu import envs
relaunch.relaunch_if_needed(plan_preloading({iomp!r}))
print(json.dumps({{
    "pid": os.getpid(),
    "preloaded": os.path.realpath({iomp!r}) in open("/proc/self/maps").read(),
    "relaunch_s": relaunch.relaunch_seconds(),
    "mark": os.environ.get(envs.DRIVER.name, ""),
    "blocker": relaunch.fork_blocker(plan_preloading({iomp!r})),
}}))
"""


@needs_iomp
def test_the_driver_reexecutes_itself_once_with_the_preloads_and_its_own_mark() -> None:
    env = {key: value for key, value in os.environ.items() if key != "OMNI_CPU_STAGE_START"}
    env.pop("LD_PRELOAD", None)
    code = RELAUNCHED.format(repo=str(REPO), iomp=IOMP)
    driver = subprocess.Popen(
        [sys.executable, "-c", code], cwd=REPO, env=env, stdout=subprocess.PIPE, text=True
    )
    out, _ = driver.communicate(timeout=120)
    assert driver.returncode == 0
    (line,) = out.splitlines()  # the first start printed nothing: it re-executed at once
    seen = json.loads(line)
    assert seen["pid"] == driver.pid  # the same process, started again
    assert seen["preloaded"] and seen["blocker"] is None
    assert seen["relaunch_s"] is not None and seen["relaunch_s"] >= 0
    assert seen["mark"].split()[0] == str(driver.pid)
