"""No machine-wide device lock around a CPU stage's start-up.

Written against vllm-omni 0.30.0. Before it starts a stage (unless
`parallel_stage_init`), `StageRuntime.launch_stage_engines` takes an exclusive
`flock` on /tmp/vllm_omni_device_<device>_init.lock for each device the stage
names, and holds it until that stage is up: on a GPU the stages and every other
vLLM-Omni process on the node then profile free memory one at a time. The lock
file is per device label and shared by every process on the machine, and
omni-cpu's labels are the stage ids (omni_cpu.launch.startup), so two omni-cpu
processes starting at once (two `serve` replicas restarted together, a `bench`
beside a server) waited for each other's whole engine start, tens of seconds on a
small box (benchmarks/RESULTS.md, "memory per process, stages forked or spawned").
A CPU stage profiles nothing:
each plans its own cores and explicit KV bytes. `install` makes that call site
take no lock; stages that share a device label are still started one after the
other (vLLM-Omni's init groups), which needs no lock.
"""

from __future__ import annotations

from typing import Any

import vllm_omni.engine.stage_runtime as stage_runtime

_ORIGINAL = stage_runtime.acquire_device_locks


def no_device_locks(*args: Any, **kwargs: Any) -> list[int]:
    """`acquire_device_locks` for CPU stages: no lock, nothing to release."""
    return []


def install() -> None:
    """Start this process's stages without vLLM-Omni's device locks."""
    stage_runtime.acquire_device_locks = no_device_locks


def uninstall() -> None:
    stage_runtime.acquire_device_locks = _ORIGINAL
