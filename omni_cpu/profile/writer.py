"""A profile as commented YAML: an `omni_cpu:` block plus a vLLM-Omni deploy config.

Every field is written with a comment naming the engine argument or environment
variable it becomes, so a reviewer reads the file and its diffs without the code.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from omni_cpu import envs
from omni_cpu.output import write_text_output
from omni_cpu.profile import choices
from omni_cpu.profile.deploy import SIZE_KEYS, deploy_config_dict, stage_env
from omni_cpu.profile.emit import emit_mapping
from omni_cpu.profile.model import PROFILE_SCHEMA_VERSION, Capacity, Profile, StagePlan
from omni_cpu.profile.sections import usable_cpus_restate_nodes

COMMENTS = {
    "omni_cpu": "read by omni-cpu only; vLLM-Omni ignores this block",
    "omni_cpu.schema_version": "profile format version",
    "omni_cpu.model": "the model the memory was sized for",
    "omni_cpu.model_kind": "its kind (custom-voice, voice-design, base); validate checks it",
    "omni_cpu.machine": "the machine this was planned for (omni-cpu validate checks it)",
    "omni_cpu.machine.fingerprint": "hash of the facts below",
    "omni_cpu.machine.memory_limit_bytes": "cgroup memory.max; null = none",
    "omni_cpu.machine.vendor": "cpuinfo vendor_id",
    "omni_cpu.machine.cpu_family": "cpuinfo cpu family: with the model, the cost model's CPU class",
    "omni_cpu.machine.cpu_model": "cpuinfo model",
    "omni_cpu.machine.calibration": "measured by probe --calibrate; the planner used it",
    "omni_cpu.machine.calibration.bandwidth_gb_s": "cores -> GB/s of weights streamed",
    "omni_cpu.machine.calibration.code2wav_ms_per_frame": "one core, per dtype",
    "omni_cpu.machine.calibration.kernels": "ms per code-predictor layer: format, kernel, rows",
    "omni_cpu.machine.calibration.code2wav_ms_per_call": "one core, per dtype",
    "omni_cpu.machine.calibration.small_op_us": "one thread: the talker step's small ops",
    "omni_cpu.capacity": "predicted by omni_cpu.plan.capacity, for people; no process reads it",
    "omni_cpu.capacity.realtime_streams": "streams at RTF <= 1, every replica together",
    "omni_cpu.capacity.source": "calibrated (probe --calibrate here) or built-in",
    "omni_cpu.capacity.weights": "the talker's weight format",
    "omni_cpu.replicas[].capacity": "this replica's predicted capacity",
    "omni_cpu.replicas[].capacity.rtf_one_stream": "wall / audio, one steady stream",
    "omni_cpu.replicas[].capacity.ttfa_s": "one stream's first audio",
    "omni_cpu.replicas[].capacity.realtime_streams": "streams at RTF <= 1 (<= max_num_seqs)",
    "omni_cpu.replicas[].capacity.talker_step_ms_at_max_seqs": "one step, max_num_seqs streams",
    "omni_cpu.replicas[].capacity.max_num_seqs": "the streams of the step above",
    "omni_cpu.replicas[].capacity.safe_start_s": (
        "one 10 s stream: earliest gap-free player start after submission"
    ),
    "omni_cpu.replicas[].capacity.stall_free_streams": (
        "streams started together, p95 safe start <= 1 s (serve's default admission)"
    ),
    "omni_cpu.capacity.stall_free_streams": "streams with p95 safe start <= 1 s, all replicas",
    "omni_cpu.env": "environment of every stage process",
    "omni_cpu.preload": "LD_PRELOAD of every stage: what start finds of it here, saying what not",
    "omni_cpu.notes": "why the planner chose what it chose",
    "omni_cpu.replicas": "one pipeline per NUMA node (omni-cpu serve --replica N)",
    "omni_cpu.replicas[].numa_node": "its home, where not its talker's CPUs' node",
    "omni_cpu.replicas[].frontend_cpus": 'API server\'s, planned; bound at start; "" = none',
    "omni_cpu.replicas[].spanning": "talker memory interleaved: OMNI_CPU_INTERLEAVE_MEMORY=1",
    "omni_cpu.replicas[].stages[].cpus": (
        "VLLM_CPU_OMP_THREADS_BIND as planned; its node follows; bound at start"
    ),
    "omni_cpu.replicas[].stages[].smt_siblings": "cpus lists whole cores, SMT siblings too",
    "omni_cpu.replicas[].stages[].memory_nodes": (
        "CPU_VISIBLE_MEMORY_NODES, where not its CPUs' node"
    ),
    "omni_cpu.replicas[].stages": "where each stage runs; sizes: replica 0's in stages: below",
    "omni_cpu.replicas[].stages[].dtype": "engine arg --dtype",
    "omni_cpu.replicas[].stages[].kv_cache_memory_bytes": "engine arg --kv-cache-memory-bytes",
    "omni_cpu.replicas[].stages[].max_num_seqs": "engine arg --max-num-seqs",
    "omni_cpu.replicas[].stages[].max_num_batched_tokens": "engine arg --max-num-batched-tokens",
    "omni_cpu.replicas[].stages[].max_model_len": "engine arg --max-model-len",
    "omni_cpu.replicas[].stages[].enforce_eager": "engine arg --enforce-eager",
    "model_runner": "vLLM-Omni model runner (the CPU platform runs v1)",
    "async_chunk": "stream codec chunks talker -> code2wav",
    "connectors.connector_of_shared_memory.extra.codec_chunk_frames": "frames per audio chunk",
    "connectors.connector_of_shared_memory.extra.codec_left_context_frames": (
        "decoder sliding window"
    ),
    "connectors.connector_of_shared_memory.extra.initial_codec_chunk_frames": (
        "first chunk: time to first audio"
    ),
    "connectors.connector_of_shared_memory.extra.codec_chunk_ramp": (
        "first chunks' sizes, then codec_chunk_frames: each arrives before it plays"
    ),
    "stages": "replica 0's sizes, their one home (other replicas': omni_cpu.replicas)",
    "stages[].dtype": "engine arg --dtype",
    "stages[].kv_cache_memory_bytes": "engine arg --kv-cache-memory-bytes",
    "stages[].max_num_seqs": "engine arg --max-num-seqs (concurrent streams)",
    "stages[].max_num_batched_tokens": "engine arg --max-num-batched-tokens",
    "stages[].max_model_len": "engine arg --max-model-len",
    "stages[].enforce_eager": "engine arg --enforce-eager (no CUDA graphs on CPU)",
    "stages[].async_scheduling": "engine arg --async-scheduling (off on CPU)",
    "stages[].additional_config": "vLLM's additional_config: the stage reads it",
    "stages[].additional_config.omni_cpu": "this stage's choices; a set OMNI_CPU_* variable wins",
    **{
        f"stages[].additional_config.omni_cpu.{name}": knob.doc
        for knobs in choices.STAGE_KNOBS.values()
        for name, knob in knobs.items()
    },
    "platforms.cpu": "each stage's environment is derived at start: see the end",
    # Every variable a stage reads says what it does, in the words of omni_cpu.envs.
    **{
        f"omni_cpu.env.{knob.name}": knob.doc
        for knob in envs.KNOBS.values()
        if knob.read_by == "stage"
    },
}


def _omni_block(profile: Profile) -> dict[str, Any]:
    machine = profile.machine
    return {
        "schema_version": PROFILE_SCHEMA_VERSION,  # whatever it was read from
        "generated_by": profile.generated_by,
        "model": profile.model,
        **({"model_kind": profile.model_kind} if profile.model_kind else {}),
        "machine": {
            "fingerprint": machine.fingerprint,
            "architecture": machine.architecture,
            "model_name": machine.model_name,
            # Left out where it is the node list's CPUs (the reader derives it).
            **({} if usable_cpus_restate_nodes(machine) else {"usable_cpus": machine.usable_cpus}),
            "isa": list(machine.isa),
            "memory_limit_bytes": machine.memory_limit_bytes,
            # What the CPU is, where cpuinfo states it (x86): older profiles have none.
            **{
                key: value
                for key, value in (
                    ("vendor", machine.vendor),
                    ("cpu_family", machine.cpu_family),
                    ("cpu_model", machine.cpu_model),
                )
                if value is not None
            },
            "numa_nodes": [dict(node) for node in machine.numa_nodes],
            **({"calibration": machine.calibration} if machine.calibration else {}),
        },
        "preload": list(profile.preload),
        "env": dict(profile.env),
        "notes": list(profile.notes),
        **({"capacity": _capacity_dict(profile.capacity)} if profile.capacity else {}),
        "replicas": [
            {
                "index": replica.index,
                # Its home follows from its talker's CPUs; written where it is elsewhere.
                **(
                    {"numa_node": replica.numa_node}
                    if replica.numa_node != replica.talker.numa_node
                    else {}
                ),
                "frontend_cpus": replica.frontend_cpus,
                # Written only where true: profiles of one-node replicas read as before.
                **({"spanning": True} if replica.spanning else {}),
                # Replica 0's sizes have one home: the deploy config's `stages:` below.
                "stages": [_replica_stage(stage, position > 0) for stage in replica.stages],
                **({"capacity": dataclasses.asdict(replica.capacity)} if replica.capacity else {}),
            }
            for position, replica in enumerate(profile.replicas)
        ],
    }


def _capacity_dict(capacity: Capacity) -> dict[str, Any]:
    return {**dataclasses.asdict(capacity), "assumptions": list(capacity.assumptions)}


def _replica_stage(stage: StagePlan, with_sizes: bool) -> dict[str, Any]:
    return {
        "stage_id": stage.stage_id,
        "name": stage.name,
        "cpus": stage.cpus,
        "smt_siblings": stage.smt_siblings,
        # Its node follows from its CPUs, and its memory is there: memory_nodes is written
        # only where it is elsewhere (a memoryless node's, a spanning replica's).
        **(
            {"memory_nodes": stage.memory_nodes}
            if stage.memory_node_ids() != (stage.numa_node,)
            else {}
        ),
        **({key: getattr(stage, key) for key in SIZE_KEYS} if with_sizes else {}),
    }


def dump_profile(profile: Profile) -> str:
    """The profile as commented YAML: an `omni_cpu:` block plus a vLLM-Omni deploy config."""
    stamp = profile.machine
    header = [
        f"# omni-cpu deploy profile, generated by {profile.generated_by}.",
        f"# Planned for {stamp.model_name} ({stamp.architecture}), usable CPUs "
        f"{stamp.usable_cpus}, fingerprint {stamp.fingerprint}.",
        "#   omni-cpu run --deploy-profile THIS_FILE --model MODEL --text 'Hello' --out a.wav",
        "#   omni-cpu validate THIS_FILE        # does it still fit this machine?",
        "#   vllm-omni serve MODEL --omni --deploy-config THIS_FILE   # vLLM binds its CPUs",
        "# The CPU ids are what it was planned with: run, serve and validate bind the same",
        "# shape (cores per stage, home node) onto the CPUs the process may use.",
        "",
    ]
    body = emit_mapping({"omni_cpu": _omni_block(profile)}, COMMENTS)
    deploy = emit_mapping(_file_deploy_config(profile), COMMENTS)
    divider = ["", "# ---- vLLM-Omni deploy config (replica 0) " + "-" * 38]
    return "\n".join(header + body + divider + deploy + derived_env_comments(profile)) + "\n"


def _file_deploy_config(profile: Profile) -> dict[str, Any]:
    """Replica 0's deploy config without the stages' environment, which start derives."""
    config = deploy_config_dict(profile, 0)
    config["platforms"] = {"cpu": {"model_runner": config["platforms"]["cpu"]["model_runner"]}}
    return config


def derived_env_comments(profile: Profile) -> list[str]:
    """What each stage's binding becomes, as comments: derived at start, never read back.

    Left out: omni_cpu.env's variables (written there) and LD_PRELOAD (found at start).
    """
    lines = [
        "",
        "# ---- derived at start from each stage's cpus (and memory_nodes), not read back ----",
        "# Bound onto the CPUs the process may use (omni-cpu validate shows how); as planned:",
    ]
    for replica in profile.replicas:
        for stage in replica.stages:
            env = stage_env(profile, replica.index, stage.stage_id)
            derived = {
                key: value
                for key, value in env.items()
                if key != "LD_PRELOAD" and key not in profile.env
            }
            pairs = " ".join(f"{key}={value}" for key, value in derived.items())
            where = f"node {stage.numa_node}"
            lines.append(f"#   replica {replica.index} {stage.name} ({where}): {pairs}")
    return lines


def save_profile(profile: Profile, path: str | Path) -> None:
    """Write the profile whole or not at all (omni_cpu.output); OutputError says why not."""
    write_text_output(Path(path), dump_profile(profile))
