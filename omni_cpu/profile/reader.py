"""A profile's YAML read strictly into a `Profile`.

Loading never raises anything but `ProfileError`, whose one line names the key
that is wrong and what it should be. The YAML itself is read by
omni_cpu.profile.strict_yaml; older schemas by omni_cpu.profile.upgrade.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from pathlib import Path
from typing import Any

from omni_cpu import envs
from omni_cpu.cpulist import parse_cpu_list
from omni_cpu.errors import CpuListError, ProfileError, SettingError
from omni_cpu.profile.deploy import (
    CONNECTOR,
    CONNECTOR_DEFAULTS,
    PLANNED_STAGE_KEYS,
    SIZE_KEYS,
    STAGE_DEFAULTS,
)
from omni_cpu.profile.fields import FieldReader
from omni_cpu.profile.model import (
    DTYPES,
    PRELOAD_NAMES,
    READABLE_SCHEMA_VERSIONS,
    Capacity,
    MachineStamp,
    Profile,
    Replica,
    ReplicaCapacity,
    StagePlan,
    Streaming,
)
from omni_cpu.profile.strict_yaml import parse_yaml, read_profile_text
from omni_cpu.profile.upgrade import (
    check_written_stage_env,
    preload_from_env,
    stage_choices,
    version_1_sizes,
)


def _machine(reader: FieldReader) -> MachineStamp:
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
                "memory_bytes": node.byte_count("memory_bytes", optional=True),
            }
        )
    isa = reader.get("isa", list)
    if not all(isinstance(flag, str) for flag in isa):
        raise ProfileError(f"{reader.path}.isa must be a list of strings")
    limit = reader.byte_count("memory_limit_bytes", optional=True)
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

    reader = FieldReader(data, path)
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


def _number(reader: FieldReader, key: str) -> float:
    value = reader.get(key, (int, float))
    if value < 0:
        raise ProfileError(f"{reader._key(key)} must not be negative ({value})")
    return float(value)


def _optional_number(reader: FieldReader, key: str) -> float | None:
    """A non-negative number a profile written before it existed leaves out."""
    return None if reader.get(key, (int, float), optional=True) is None else _number(reader, key)


def _optional_count(reader: FieldReader, key: str) -> int | None:
    return None if reader.get(key, int, optional=True) is None else reader.non_negative(key)


def _replica_capacity(replica: FieldReader) -> ReplicaCapacity:
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


def _capacity(reader: FieldReader) -> Capacity:
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


def _streaming(root: FieldReader) -> Streaming:
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


def _chunk_ramp(extra: FieldReader) -> tuple[int, ...]:
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


def _stage_sizes(root: FieldReader) -> dict[int, dict[str, Any]]:
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


def parse_profile(text: str, source: str = "profile") -> Profile:
    """Parse and check a profile's YAML text; ProfileError names the file, line and key."""
    data, lines = parse_yaml(text, source)
    try:
        return _profile(data)
    except ProfileError as bad:
        raise _located(bad, source, lines) from None


# A key path as errors name it: `omni_cpu.replicas[0].stages[1].cpus`.
_KEY_PATH = re.compile(r"[A-Za-z_]\w*(?:\[\d+\]|\.[A-Za-z_]\w*)*")


def _located(error: ProfileError, source: str, lines: dict[str, int]) -> ProfileError:
    """`error` with the file and the line of the first key path it names (or of the
    nearest key above it that the file has)."""
    message = str(error)
    paths = [match.group() for match in _KEY_PATH.finditer(message)]
    dotted = [path for path in paths if "." in path or "[" in path]
    line = next((lines[path] for path in dotted + paths if path in lines), None)
    for path in dotted if line is None else ():
        while line is None and ("." in path or "[" in path):
            path = re.sub(r"(\.[A-Za-z_]\w*|\[\d+\])$", "", path)
            line = lines.get(path)
    where = f"{source} line {line}" if line is not None else source
    return ProfileError(f"{where}: {message}", error.fix)


def _profile(data: Any) -> Profile:
    root = FieldReader(data, "")
    root.only("omni_cpu", "model_runner", "async_chunk", "connectors", "stages", "platforms")
    omni = root.child("omni_cpu")
    omni.only(
        "schema_version",
        "generated_by",
        "model",
        "model_kind",
        "machine",
        "preload",
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
    if version < 4:  # an LD_PRELOAD path of the planning machine: its libraries by name
        env, preload, legacy_paths = preload_from_env(dict(env))
    else:
        if "LD_PRELOAD" in env:
            raise ProfileError(
                "omni_cpu.env.LD_PRELOAD is a path of one machine",
                f"name the libraries in omni_cpu.preload ({', '.join(PRELOAD_NAMES)}): "
                "each is found at start in the runtime that runs",
            )
        preload, legacy_paths = _preload(omni), ()
    _check_env_values(env)
    notes = omni.get("notes", list)
    sizes = _stage_sizes(root)
    chosen, env = stage_choices(root, dict(env), sorted(sizes))
    replicas = []
    for replica in omni.items("replicas"):
        replica.only("index", "numa_node", "frontend_cpus", "spanning", "stages", "capacity")
        stages = []
        for stage in replica.items("stages"):
            stage_id = stage.non_negative("stage_id")
            if stage_id not in sizes:
                raise ProfileError(f"{stage.path}.stage_id {stage_id} has no entry in stages")
            if version == 1:
                own = version_1_sizes(replica, stage, sizes[stage_id])
            else:
                own = _replica_stage_sizes(stage, sizes[stage_id]["settings"])
            stages.append(
                StagePlan(
                    stage_id=stage_id,
                    cpus=stage.cpu_list("cpus"),
                    choices=chosen[stage_id],
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
        preload=preload,
        schema_version=version,  # as read; written back in the current schema
    )
    if version < 4:
        check_written_stage_env(root, profile, legacy_paths)
    else:
        _check_platforms(root)
    return profile


def _check_env_values(env: dict[str, str]) -> None:
    """A variable omni-cpu knows (omni_cpu.envs) set to a value it does not take: the line
    start would refuse it with, found at load."""
    for key, value in env.items():
        knob = envs.KNOBS.get(key)
        if knob is None:
            continue
        try:
            knob.read(value, f"omni_cpu.env.{key}")
        except SettingError as bad:
            raise ProfileError(bad.args[0], bad.fix) from None


def _preload(omni: FieldReader) -> tuple[str, ...]:
    """`omni_cpu.preload`: libraries by name (PRELOAD_NAMES), each once."""
    names = omni.get("preload", list, optional=True) or []
    for index, name in enumerate(names):
        if name not in PRELOAD_NAMES:
            close = difflib.get_close_matches(str(name), PRELOAD_NAMES, n=1)
            raise ProfileError(
                f"omni_cpu.preload[{index}] is {name!r}, not a library omni-cpu preloads",
                (f"did you mean {close[0]!r}? " if close else "")
                + f"it preloads {', '.join(PRELOAD_NAMES)}",
            )
    if len(set(names)) != len(names):
        raise ProfileError("omni_cpu.preload names a library twice", "keep one of them")
    return tuple(names)


def _check_platforms(root: FieldReader) -> None:
    """Schema 4's `platforms.cpu`: the runner only; each stage's environment is derived."""
    platforms = root.child("platforms")
    platforms.only("cpu")
    cpu = platforms.child("cpu")
    if "stages" in cpu.data:
        raise ProfileError(
            "platforms.cpu.stages: each stage's environment is derived at start from "
            "omni_cpu.replicas[].stages[].cpus and memory_nodes, not written",
            "remove the block; put variables every stage needs in omni_cpu.env",
        )
    cpu.only("model_runner")


def _replica_stage_sizes(stage: FieldReader, settings: dict[str, Any]) -> dict[str, Any]:
    """Schema 2: a replica's stage carries its own sizes; settings are shared."""
    stage.only("stage_id", "name", "cpus", "smt_siblings", "numa_node", "memory_nodes", *SIZE_KEYS)
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
        "smt_siblings": bool(stage.get("smt_siblings", bool, optional=True)),
        **_sizes(stage, dtype),
        "settings": settings,
    }


def _sizes(stage: FieldReader, dtype: str) -> dict[str, Any]:
    """A stage's planned sizes (SIZE_KEYS), read and checked the same in either schema."""
    return {
        "dtype": dtype,
        "kv_cache_memory_bytes": stage.byte_count("kv_cache_memory_bytes"),
        "max_num_seqs": stage.positive("max_num_seqs"),
        "max_num_batched_tokens": stage.positive("max_num_batched_tokens"),
        "max_model_len": stage.positive("max_model_len"),
        "enforce_eager": stage.get("enforce_eager", bool),
    }


def _check_replica_zero(replica: Replica, sizes: dict[int, dict[str, Any]]) -> None:
    """The deploy config's `stages:` is replica 0: both places must say the same."""
    for stage in replica.stages:
        for key in SIZE_KEYS:
            top = sizes[stage.stage_id][key]
            if getattr(stage, key) != top:
                raise ProfileError(
                    f"stages[{stage.stage_id}].{key} is {top!r} but "
                    f"omni_cpu.replicas[0].stages[{stage.stage_id}].{key} is "
                    f"{getattr(stage, key)!r}",
                    "edit both together, or regenerate with `omni-cpu probe --output FILE`",
                )


def load_profile(path: str | Path) -> Profile:
    """Read and check a profile file (or a pipe that sends one)."""
    path = Path(path)
    return parse_profile(read_profile_text(path), str(path))
