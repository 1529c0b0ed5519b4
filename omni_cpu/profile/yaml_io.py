"""Profiles as YAML: written with a comment on every field, loaded strictly.

Loading never raises anything but `ProfileError`, whose one line names the key
that is wrong and what it should be. The reader is strict about YAML itself too:
a file over `MAX_PROFILE_BYTES`, a key given twice (YAML would keep the last one
silently) or an alias (`*name`: a few lines can expand to gigabytes) is refused
with its line.
"""

from __future__ import annotations

import dataclasses
import os
import select
import stat
import time
from pathlib import Path
from typing import Any

import yaml

from omni_cpu import envs
from omni_cpu.cpulist import parse_cpu_list
from omni_cpu.errors import CpuListError, ProfileError, SettingError
from omni_cpu.profile import choices
from omni_cpu.profile.deploy import (
    CONNECTOR,
    CONNECTOR_DEFAULTS,
    OPENMP_BINDING_KEYS,
    PLANNED_STAGE_KEYS,
    STAGE_DEFAULTS,
    deploy_config_dict,
    stage_env,
)
from omni_cpu.profile.emit import emit_mapping
from omni_cpu.profile.model import (
    DTYPES,
    READABLE_SCHEMA_VERSIONS,
    Capacity,
    MachineStamp,
    Profile,
    Replica,
    ReplicaCapacity,
    StagePlan,
    Streaming,
)

COMMENTS = {
    "omni_cpu": "read by omni-cpu only; vLLM-Omni ignores this block",
    "omni_cpu.schema_version": "profile format version",
    "omni_cpu.model": "the model the memory was sized for",
    "omni_cpu.model_kind": "its kind (custom-voice, voice-design, base); validate checks it",
    "omni_cpu.machine": "the machine this was planned for (omni-cpu validate checks it)",
    "omni_cpu.machine.fingerprint": "hash of the facts below",
    "omni_cpu.machine.memory_limit_bytes": "cgroup memory.max; null = none",
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
    "omni_cpu.env.LD_PRELOAD": "Intel OpenMP / tcmalloc found on this machine",
    "omni_cpu.notes": "why the planner chose what it chose",
    "omni_cpu.replicas": "one pipeline per NUMA node (omni-cpu serve --replica N)",
    "omni_cpu.replicas[].numa_node": "its home: the first node its memory is on",
    "omni_cpu.replicas[].frontend_cpus": 'taskset of the API server; "" = none reserved',
    "omni_cpu.replicas[].spanning": "talker memory interleaved: OMNI_CPU_INTERLEAVE_MEMORY=1",
    "omni_cpu.replicas[].stages[].cpus": "VLLM_CPU_OMP_THREADS_BIND (1 thread per core)",
    "omni_cpu.replicas[].stages[].numa_node": "the node its cores are on",
    "omni_cpu.replicas[].stages[].memory_nodes": "CPU_VISIBLE_MEMORY_NODES",
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
    "stages": "replica 0 (each replica's own sizes: omni_cpu.replicas)",
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
    "platforms.cpu.stages[].env": "per-stage process environment (replica 0)",
    # Every variable a stage reads says what it does, in the words of omni_cpu.envs.
    **{
        f"{block}.{knob.name}": knob.doc
        for knob in envs.KNOBS.values()
        if knob.read_by == "stage"
        for block in ("omni_cpu.env", "platforms.cpu.stages[].env")
    },
}


def _omni_block(profile: Profile) -> dict[str, Any]:
    machine = profile.machine
    return {
        "schema_version": profile.schema_version,
        "generated_by": profile.generated_by,
        "model": profile.model,
        **({"model_kind": profile.model_kind} if profile.model_kind else {}),
        "machine": {
            "fingerprint": machine.fingerprint,
            "architecture": machine.architecture,
            "model_name": machine.model_name,
            "usable_cpus": machine.usable_cpus,
            "isa": list(machine.isa),
            "memory_limit_bytes": machine.memory_limit_bytes,
            "numa_nodes": [dict(node) for node in machine.numa_nodes],
            **({"calibration": machine.calibration} if machine.calibration else {}),
        },
        "env": dict(profile.env),
        "notes": list(profile.notes),
        **({"capacity": _capacity_dict(profile.capacity)} if profile.capacity else {}),
        "replicas": [
            {
                "index": replica.index,
                "numa_node": replica.numa_node,
                "frontend_cpus": replica.frontend_cpus,
                # Written only where true: profiles of one-node replicas read as before.
                **({"spanning": True} if replica.spanning else {}),
                "stages": [_replica_stage(stage) for stage in replica.stages],
                **({"capacity": dataclasses.asdict(replica.capacity)} if replica.capacity else {}),
            }
            for replica in profile.replicas
        ],
    }


def _capacity_dict(capacity: Capacity) -> dict[str, Any]:
    return {**dataclasses.asdict(capacity), "assumptions": list(capacity.assumptions)}


def _replica_stage(stage: StagePlan) -> dict[str, Any]:
    return {
        "stage_id": stage.stage_id,
        "name": stage.name,
        "cpus": stage.cpus,
        "numa_node": stage.numa_node,
        "memory_nodes": stage.memory_nodes or str(stage.numa_node),
        **{key: getattr(stage, key) for key in _SIZE_KEYS},
    }


# Per-stage sizes every replica carries (schema 2) beside its binding: what the profile
# plans for a stage, but async_scheduling, which is always false on CPU.
_SIZE_KEYS = tuple(key for key in PLANNED_STAGE_KEYS if key != "async_scheduling")


def dump_profile(profile: Profile) -> str:
    """The profile as commented YAML: an `omni_cpu:` block plus a vLLM-Omni deploy config."""
    stamp = profile.machine
    header = [
        f"# omni-cpu deploy profile, generated by {profile.generated_by}.",
        f"# Planned for {stamp.model_name} ({stamp.architecture}), usable CPUs "
        f"{stamp.usable_cpus}, fingerprint {stamp.fingerprint}.",
        "#   omni-cpu run --deploy-profile THIS_FILE --model MODEL --text 'Hello' --out a.wav",
        "#   omni-cpu validate THIS_FILE        # does it still fit this machine?",
        "#   vllm serve MODEL --omni --deploy-config THIS_FILE   # complete vLLM-Omni config",
        "",
    ]
    body = emit_mapping({"omni_cpu": _omni_block(profile)}, COMMENTS)
    deploy = emit_mapping(deploy_config_dict(profile, 0), COMMENTS)
    divider = ["", "# ---- vLLM-Omni deploy config (replica 0) " + "-" * 38]
    return "\n".join(header + body + divider + deploy) + "\n"


def save_profile(profile: Profile, path: str | Path) -> None:
    Path(path).write_text(dump_profile(profile))


# --- strict loading ---------------------------------------------------------------


class _Reader:
    """Typed access to a parsed YAML mapping; every failure names the key path."""

    def __init__(self, data: Any, path: str) -> None:
        if not isinstance(data, dict):
            raise ProfileError(f"{path or 'profile'} must be a mapping, not {type(data).__name__}")
        self.data = data
        self.path = path

    def _key(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def only(self, *allowed: str) -> None:
        for key in self.data:
            if key not in allowed:
                raise ProfileError(
                    f"unknown key {self._key(str(key))}",
                    "allowed here: " + ", ".join(allowed),
                )

    def get(self, key: str, kind: type | tuple[type, ...], *, optional: bool = False) -> Any:
        if key not in self.data:
            if optional:
                return None
            raise ProfileError(f"missing key {self._key(key)}")
        value = self.data[key]
        if value is None and optional:
            return None
        kinds = kind if isinstance(kind, tuple) else (kind,)
        # bool is an int in Python; a YAML `true` is never a byte count.
        if isinstance(value, bool) and bool not in kinds:
            value_ok = False
        else:
            value_ok = isinstance(value, kinds)
        if not value_ok:
            names = " or ".join(k.__name__ for k in kinds)
            raise ProfileError(
                f"{self._key(key)} must be {names}, not {type(value).__name__} ({value!r})"
            )
        return value

    def non_negative(self, key: str) -> int:
        value = self.get(key, int)
        if value < 0:
            raise ProfileError(f"{self._key(key)} must not be negative ({value})")
        return value

    def positive(self, key: str) -> int:
        value = self.get(key, int)
        if value < 1:
            raise ProfileError(f"{self._key(key)} must be at least 1 ({value})")
        return value

    def cpu_list(self, key: str, *, allow_empty: bool = False) -> str:
        text = self.get(key, str)
        try:
            cpus = parse_cpu_list(text)
        except CpuListError as bad:
            raise ProfileError(f"{self._key(key)}: {bad}", bad.fix) from None
        if not cpus and not allow_empty:
            raise ProfileError(f"{self._key(key)} names no CPU")
        return text

    def child(self, key: str) -> _Reader:
        return _Reader(self.get(key, dict), self._key(key))

    def items(self, key: str) -> list[_Reader]:
        values = self.get(key, list)
        return [_Reader(item, f"{self._key(key)}[{i}]") for i, item in enumerate(values)]


def _machine(reader: _Reader) -> MachineStamp:
    reader.only(
        "fingerprint", "architecture", "model_name", "usable_cpus", "isa",
        "memory_limit_bytes", "numa_nodes", "calibration",
    )  # fmt: skip
    nodes = []
    for node in reader.items("numa_nodes"):
        node.only("id", "cpus", "memory_bytes")
        nodes.append(
            {
                "id": node.non_negative("id"),
                "cpus": node.cpu_list("cpus", allow_empty=True),
                "memory_bytes": node.get("memory_bytes", int, optional=True),
            }
        )
    isa = reader.get("isa", list)
    if not all(isinstance(flag, str) for flag in isa):
        raise ProfileError(f"{reader.path}.isa must be a list of strings")
    limit = reader.get("memory_limit_bytes", int, optional=True)
    if limit is not None and limit < 0:
        raise ProfileError(f"{reader.path}.memory_limit_bytes must not be negative ({limit})")
    calibration = reader.get("calibration", dict, optional=True)
    if calibration is not None:
        calibration = _calibration(calibration, f"{reader.path}.calibration")
    return MachineStamp(
        calibration=calibration,
        fingerprint=reader.get("fingerprint", str),
        architecture=reader.get("architecture", str),
        model_name=reader.get("model_name", str),
        usable_cpus=reader.cpu_list("usable_cpus", allow_empty=True),
        numa_nodes=tuple(nodes),
        isa=tuple(isa),
        memory_limit_bytes=limit,
    )


def _calibration(data: dict[str, Any], path: str) -> dict[str, Any]:
    """A calibration block as `Calibration.to_dict` writes it; anything else names the key."""
    from omni_cpu.profile.calibration import Calibration

    reader = _Reader(data, path)
    reader.only(
        "bandwidth_gb_s",
        "code2wav_ms_per_frame",
        "seconds",
        "code2wav_ms_per_call",
        "small_op_us",
        "kernels",
    )
    try:
        return Calibration.from_dict(data).to_dict()
    except (TypeError, ValueError, AttributeError):
        raise ProfileError(
            f"{path} must map core counts to GB/s and dtypes to ms",
            "rerun `omni-cpu probe --calibrate --output FILE`",
        ) from None


def _number(reader: _Reader, key: str) -> float:
    value = reader.get(key, (int, float))
    if value < 0:
        raise ProfileError(f"{reader._key(key)} must not be negative ({value})")
    return float(value)


def _optional_number(reader: _Reader, key: str) -> float | None:
    """A non-negative number a profile written before it existed leaves out."""
    return None if reader.get(key, (int, float), optional=True) is None else _number(reader, key)


def _optional_count(reader: _Reader, key: str) -> int | None:
    return None if reader.get(key, int, optional=True) is None else reader.non_negative(key)


def _replica_capacity(replica: _Reader) -> ReplicaCapacity:
    """A replica's predicted capacity, as `_omni_block` writes it (written, never planned from)."""
    reader = replica.child("capacity")
    reader.only(*(f.name for f in dataclasses.fields(ReplicaCapacity)))
    return ReplicaCapacity(
        source=reader.get("source", str),
        weights=reader.get("weights", str),
        rtf_one_stream=_number(reader, "rtf_one_stream"),
        ttfa_s=_number(reader, "ttfa_s"),
        realtime_streams=reader.non_negative("realtime_streams"),
        talker_step_ms=_number(reader, "talker_step_ms"),
        talker_step_ms_at_max_seqs=_number(reader, "talker_step_ms_at_max_seqs"),
        max_num_seqs=reader.positive("max_num_seqs"),
        code2wav_ms_per_frame=_number(reader, "code2wav_ms_per_frame"),
        limit=reader.get("limit", str),
        safe_start_s=_optional_number(reader, "safe_start_s"),
        stall_free_streams=_optional_count(reader, "stall_free_streams"),
    )


def _capacity(reader: _Reader) -> Capacity:
    reader.only(*(f.name for f in dataclasses.fields(Capacity)))
    assumptions = reader.get("assumptions", list)
    if not all(isinstance(line, str) for line in assumptions):
        raise ProfileError(f"{reader.path}.assumptions must be a list of strings")
    return Capacity(
        realtime_streams=reader.non_negative("realtime_streams"),
        source=reader.get("source", str),
        weights=reader.get("weights", str),
        assumptions=tuple(assumptions),
        stall_free_streams=_optional_count(reader, "stall_free_streams"),
    )


def _streaming(root: _Reader) -> Streaming:
    connectors = root.child("connectors")
    connectors.only(CONNECTOR)
    connector = connectors.child(CONNECTOR)
    connector.only("name", "extra")
    if connector.get("name", str) != "SharedMemoryConnector":
        raise ProfileError(f"{connector.path}.name must be SharedMemoryConnector")
    extra = connector.child("extra")
    planned = (
        "codec_chunk_frames",
        "codec_left_context_frames",
        "initial_codec_chunk_frames",
        "codec_chunk_ramp",
    )
    extra.only(*CONNECTOR_DEFAULTS, *planned)
    for key, default in CONNECTOR_DEFAULTS.items():
        if key in extra.data and extra.data[key] != default:
            raise ProfileError(
                f"{extra.path}.{key} is fixed by omni-cpu at {default!r}",
                "remove the line or restore the value",
            )
    return Streaming(
        initial_codec_chunk_frames=extra.positive("initial_codec_chunk_frames"),
        codec_chunk_frames=extra.positive("codec_chunk_frames"),
        codec_left_context_frames=extra.non_negative("codec_left_context_frames"),
        codec_chunk_ramp=_chunk_ramp(extra),
    )


def _chunk_ramp(extra: _Reader) -> tuple[int, ...]:
    """vLLM-Omni's codec_chunk_ramp: at least two positive frame counts, or none."""
    ramp = extra.get("codec_chunk_ramp", list, optional=True)
    if ramp is None:
        return ()
    if len(ramp) < 2 or not all(
        isinstance(size, int) and not isinstance(size, bool) and size > 0 for size in ramp
    ):
        raise ProfileError(
            f"{extra.path}.codec_chunk_ramp must list at least two positive frame counts",
            "write it like [1, 2, 4, 10], or remove the line for no ramp",
        )
    return tuple(ramp)


def _stage_sizes(root: _Reader) -> dict[int, dict[str, Any]]:
    sizes: dict[int, dict[str, Any]] = {}
    for stage in root.items("stages"):
        stage_id = stage.non_negative("stage_id")
        settings_keys = tuple(STAGE_DEFAULTS.get(stage_id, {}))
        stage.only("stage_id", *PLANNED_STAGE_KEYS, *settings_keys, "additional_config")
        dtype = stage.get("dtype", str)
        if dtype not in DTYPES:
            raise ProfileError(
                f"{stage.path}.dtype must be one of {', '.join(DTYPES)}, not {dtype}"
            )
        if stage.get("async_scheduling", bool) is not False:
            raise ProfileError(f"{stage.path}.async_scheduling must be false on CPU")
        settings = {}
        for key in settings_keys:
            if key in stage.data:
                expected = type(STAGE_DEFAULTS[stage_id][key])
                settings[key] = stage.get(key, expected)
        sizes[stage_id] = {**_sizes(stage, dtype), "settings": settings}
    if sorted(sizes) != [0, 1]:
        raise ProfileError(f"stages must list stage_id 0 and 1, found {sorted(sizes)}")
    return sizes


# A planned profile is a few KiB; anything this large is not one.
MAX_PROFILE_BYTES = 1 << 20


class _StrictLoader(yaml.SafeLoader):
    """safe_load that refuses aliases and duplicate keys, naming their line."""

    source = "profile"

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise ProfileError(
                f"{self.source} line {event.start_mark.line + 1}: YAML alias *{event.anchor} "
                "is not allowed in a profile",
                "write the value out in full",
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                first = seen.setdefault(key, line)
            except TypeError:
                continue  # an unhashable key: construct_mapping refuses it below
            if first != line:
                raise ProfileError(
                    f"{self.source} line {line}: key {key!r} is given twice (first at line "
                    f"{first})",
                    "keep one of them",
                )
        return super().construct_mapping(node, deep=deep)


def _too_large(source: str, size: int) -> ProfileError:
    return ProfileError(
        f"{source} is {size} bytes; a profile is at most {MAX_PROFILE_BYTES}",
        "name the profile file `omni-cpu probe --output FILE` wrote",
    )


def parse_profile(text: str, source: str = "profile") -> Profile:
    """Parse and check a profile's YAML text; raises ProfileError naming the bad key."""
    if len(text) > MAX_PROFILE_BYTES:
        raise _too_large(source, len(text.encode(errors="replace")))
    loader: _StrictLoader | None = None
    try:
        loader = _StrictLoader(text)
        loader.source = source
        data = loader.get_single_data()
    except RecursionError:
        raise ProfileError(f"{source} nests too deeply to be a profile") from None
    except yaml.YAMLError as bad:
        where = getattr(bad, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        raise ProfileError(f"{source} is not valid YAML{line}") from None
    finally:
        if loader is not None:
            loader.dispose()
    root = _Reader(data, "")
    root.only("omni_cpu", "model_runner", "async_chunk", "connectors", "stages", "platforms")
    omni = root.child("omni_cpu")
    omni.only(
        "schema_version",
        "generated_by",
        "model",
        "model_kind",
        "machine",
        "env",
        "notes",
        "capacity",
        "replicas",
    )
    version = omni.get("schema_version", int)
    if version not in READABLE_SCHEMA_VERSIONS:
        raise ProfileError(
            f"omni_cpu.schema_version {version} is not supported (this omni-cpu reads "
            f"{', '.join(map(str, READABLE_SCHEMA_VERSIONS))})",
            "regenerate the profile with `omni-cpu probe --output FILE`",
        )
    if root.get("model_runner", str) != "v1":
        raise ProfileError("model_runner must be v1 (the CPU platform's runner)")
    root.get("async_chunk", bool)
    env = omni.get("env", dict)
    for key, value in env.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ProfileError(f"omni_cpu.env.{key} must be a string (quote it)")
    notes = omni.get("notes", list)
    sizes = _stage_sizes(root)
    stage_choices, env = _stage_choices(root, dict(env), sorted(sizes))
    replicas = []
    for replica in omni.items("replicas"):
        replica.only("index", "numa_node", "frontend_cpus", "spanning", "stages", "capacity")
        stages = []
        for stage in replica.items("stages"):
            stage_id = stage.non_negative("stage_id")
            if stage_id not in sizes:
                raise ProfileError(f"{stage.path}.stage_id {stage_id} has no entry in stages")
            if version == 1:  # one `stages:` block sized every replica
                stage.only("stage_id", "name", "cpus")
                numa_node = replica.non_negative("numa_node")
                own = {**sizes[stage_id], "numa_node": numa_node, "memory_nodes": str(numa_node)}
            else:
                own = _replica_stage_sizes(stage, sizes[stage_id]["settings"])
            stages.append(
                StagePlan(
                    stage_id=stage_id,
                    cpus=stage.cpu_list("cpus"),
                    choices=stage_choices[stage_id],
                    **own,
                )
            )
        replicas.append(
            Replica(
                index=replica.non_negative("index"),
                numa_node=replica.non_negative("numa_node"),
                frontend_cpus=replica.cpu_list("frontend_cpus", allow_empty=True),
                stages=tuple(stages),
                capacity=_replica_capacity(replica) if "capacity" in replica.data else None,
                spanning=bool(replica.get("spanning", bool, optional=True)),
            )
        )
    if not replicas:
        raise ProfileError("omni_cpu.replicas lists no replica")
    if version > 1:
        _check_replica_zero(replicas[0], sizes)
    profile = Profile(
        generated_by=omni.get("generated_by", str),
        machine=_machine(omni.child("machine")),
        model=omni.get("model", str),
        model_kind=omni.get("model_kind", str, optional=True) or "",
        dtype=replicas[0].stages[0].dtype,
        streaming=_streaming(root),
        replicas=tuple(replicas),
        env=dict(env),
        notes=tuple(str(note) for note in notes),
        capacity=_capacity(omni.child("capacity")) if "capacity" in omni.data else None,
    )
    _check_platform_env(root, profile)
    return profile


def _stage_choices(
    root: _Reader, env: dict[str, str], stage_ids: list[int]
) -> tuple[dict[int, dict[str, str]], dict[str, str]]:
    """Each stage's whole choices (omni_cpu.profile.choices), and `env` without any of them.

    A profile written before the stage entries said them (schema 1 and 2) has them in
    `omni_cpu.env` (`OMNI_CPU_WEIGHTS: int4`): each moves to the stage that reads it and
    keeps its meaning. One named in both places must say the same.
    """
    given: dict[int, dict[str, str]] = {}
    for stage in root.items("stages"):
        config = stage.get("additional_config", dict, optional=True)
        if config is None:
            continue
        where = f"{stage.path}.additional_config"
        _Reader(config, where).only(choices.KEY)
        stage_id = stage.non_negative("stage_id")
        entry = config.get(choices.KEY) or {}
        given[stage_id] = choices.check_entry(entry, stage_id, f"{where}.{choices.KEY}")
    rest: dict[str, str] = {}
    moved: dict[int, dict[str, str]] = {}
    for key, value in env.items():
        if key not in choices.STAGE_OF:
            rest[key] = value
            continue
        stage_id, name = choices.STAGE_OF[key], choices.NAME_OF[key]
        knob = envs.KNOBS[key]
        try:
            wanted = knob.read(value, f"omni_cpu.env.{key}")
        except SettingError as bad:
            raise ProfileError(bad.args[0], bad.fix) from None
        entry = given.get(stage_id, {})
        if name in entry and choices.resolve(knob, entry, {}) != wanted:
            raise ProfileError(
                f"omni_cpu.env.{key} is {value!r} but stages[{stage_id}].additional_config."
                f"{choices.KEY}.{name} is {entry[name]!r}",
                "keep the stage entry's and remove the env line",
            )
        moved.setdefault(stage_id, {})[name] = value
    whole = {
        stage_id: choices.for_stage(
            stage_id, {**moved.get(stage_id, {}), **given.get(stage_id, {})}
        )
        for stage_id in stage_ids
    }
    return whole, rest


def _replica_stage_sizes(stage: _Reader, settings: dict[str, Any]) -> dict[str, Any]:
    """Schema 2: a replica's stage carries its own sizes; settings are shared."""
    stage.only("stage_id", "name", "cpus", "numa_node", "memory_nodes", *_SIZE_KEYS)
    dtype = stage.get("dtype", str)
    if dtype not in DTYPES:
        raise ProfileError(f"{stage.path}.dtype must be one of {', '.join(DTYPES)}, not {dtype}")
    memory_nodes = stage.get("memory_nodes", str)
    try:
        if not parse_cpu_list(memory_nodes):
            raise ProfileError(f"{stage.path}.memory_nodes names no node")
    except CpuListError as bad:
        raise ProfileError(f"{stage.path}.memory_nodes: {bad}", "write e.g. 0 or 0-1") from None
    return {
        "numa_node": stage.non_negative("numa_node"),
        "memory_nodes": memory_nodes,
        **_sizes(stage, dtype),
        "settings": settings,
    }


def _sizes(stage: _Reader, dtype: str) -> dict[str, Any]:
    """A stage's planned sizes (_SIZE_KEYS), read and checked the same in either schema."""
    return {
        "dtype": dtype,
        "kv_cache_memory_bytes": stage.non_negative("kv_cache_memory_bytes"),
        "max_num_seqs": stage.positive("max_num_seqs"),
        "max_num_batched_tokens": stage.positive("max_num_batched_tokens"),
        "max_model_len": stage.positive("max_model_len"),
        "enforce_eager": stage.get("enforce_eager", bool),
    }


def _check_replica_zero(replica: Replica, sizes: dict[int, dict[str, Any]]) -> None:
    """The deploy config's `stages:` is replica 0: both places must say the same."""
    for stage in replica.stages:
        for key in _SIZE_KEYS:
            top = sizes[stage.stage_id][key]
            if getattr(stage, key) != top:
                raise ProfileError(
                    f"stages[{stage.stage_id}].{key} is {top!r} but "
                    f"omni_cpu.replicas[0].stages[{stage.stage_id}].{key} is "
                    f"{getattr(stage, key)!r}",
                    "edit both together, or regenerate with `omni-cpu probe --output FILE`",
                )


def _check_platform_env(root: _Reader, profile: Profile) -> None:
    """`platforms.cpu` is what vLLM-Omni applies: it must say what omni_cpu says."""
    platforms = root.child("platforms")
    platforms.only("cpu")
    cpu = platforms.child("cpu")
    cpu.only("model_runner", "stages")
    for stage in cpu.items("stages"):
        stage.only("stage_id", "env")
        stage_id = stage.non_negative("stage_id")
        env = stage.get("env", dict)
        try:
            expected = stage_env(profile, 0, stage_id)
        except KeyError:
            raise ProfileError(f"{stage.path}.stage_id {stage_id} is not a stage") from None
        # The OpenMP binding is derived from VLLM_CPU_OMP_THREADS_BIND at launch;
        # files written before it was listed (or without it) still say the same.
        for key, value in expected.items():
            if key in OPENMP_BINDING_KEYS and key not in env:
                continue
            if env.get(key) != value:
                raise ProfileError(
                    f"{stage.path}.env.{key} is {env.get(key)!r} but omni_cpu says {value!r}",
                    "edit both together, or regenerate with `omni-cpu probe --output FILE`",
                )


# A profile read from a pipe (`<(cat deploy.yaml)`, a FIFO) must start arriving this soon.
PIPE_WAIT_S = 10.0


def _read_pipe(path: Path) -> str:
    """A pipe's whole text, refused when no writer sends any within PIPE_WAIT_S.

    Opened without blocking: a FIFO nobody writes to would otherwise hang the
    command silently.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    chunks: list[bytes] = []
    size = 0
    deadline = time.monotonic() + PIPE_WAIT_S
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ProfileError(
                    f"profile {path} is a pipe nobody wrote a profile to within {PIPE_WAIT_S:g} s",
                    "start the writer first, or give the profile as a file",
                )
            if not select.select([fd], [], [], remaining)[0]:
                continue
            try:
                data = os.read(fd, 1 << 16)
            except BlockingIOError:
                continue
            if not data:
                break
            size += len(data)
            if size > MAX_PROFILE_BYTES:
                raise _too_large(str(path), size)
            chunks.append(data)
            deadline = time.monotonic() + PIPE_WAIT_S  # data keeps coming: wait on
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8")


def load_profile(path: str | Path) -> Profile:
    """Read and check a profile file (or a pipe that sends one)."""
    path = Path(path)
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            return parse_profile(_read_pipe(path), str(path))
        if info.st_size > MAX_PROFILE_BYTES:
            raise _too_large(str(path), info.st_size)
        with path.open(encoding="utf-8") as handle:
            text = handle.read(MAX_PROFILE_BYTES + 1)
    except FileNotFoundError:
        raise ProfileError(
            f"profile {path} does not exist", "create one with `omni-cpu probe --output FILE`"
        ) from None
    except (OSError, UnicodeDecodeError) as bad:
        raise ProfileError(f"cannot read profile {path}: {bad}") from None
    return parse_profile(text, str(path))
