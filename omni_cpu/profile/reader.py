"""A profile's YAML read strictly into a `Profile`.

Loading never raises anything but `ProfileError`, whose one line names the key
that is wrong and what it should be. The YAML itself is read by
omni_cpu.profile.strict_yaml; an older schema is first upgraded to the current one
(omni_cpu.profile.upgrade), so this reads one schema.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

from omni_cpu import envs
from omni_cpu.cpulist import parse_cpu_list
from omni_cpu.errors import CpuListError, ProfileError, SettingError
from omni_cpu.profile.deploy import (
    PLANNED_STAGE_KEYS,
    SIZE_KEYS,
    STAGE_DEFAULTS,
)
from omni_cpu.profile.env_choices import stage_choices
from omni_cpu.profile.fields import FieldReader
from omni_cpu.profile.model import (
    DTYPES,
    PRELOAD_NAMES,
    PROFILE_SCHEMA_VERSION,
    TALKER_STAGE,
    Profile,
    Replica,
    StagePlan,
)
from omni_cpu.profile.sections import (
    read_capacity,
    read_machine,
    read_replica_capacity,
    read_streaming,
)
from omni_cpu.profile.strict_yaml import parse_yaml, read_profile_text
from omni_cpu.profile.upgrade import first_cpu_node, stamp_node_of, upgrade


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
    """`error` with the file and the line of the first key path it names."""
    return ProfileError(f"{where(str(error), source, lines)}: {error}", error.fix)


def where(message: str, source: str, lines: dict[str, int]) -> str:
    """`SOURCE line N`: the line of the first key path `message` names (or of the nearest
    key above it that the file has); `SOURCE` alone where it names none."""
    paths = [match.group() for match in _KEY_PATH.finditer(message)]
    dotted = [path for path in paths if "." in path or "[" in path]
    line = next((lines[path] for path in dotted + paths if path in lines), None)
    for path in dotted if line is None else ():
        while line is None and ("." in path or "[" in path):
            path = re.sub(r"(\.[A-Za-z_]\w*|\[\d+\])$", "", path)
            line = lines.get(path)
    return f"{source} line {line}" if line is not None else source


def key_lines_of(path: str | Path) -> dict[str, int]:
    """The line of every key path in the profile file at `path` (one that loaded)."""
    return parse_yaml(read_profile_text(Path(path)), str(path))[1]


def _profile(data: Any) -> Profile:
    raw, version = upgrade(data, read_current)
    return read_current(raw, version)


def read_current(raw: dict[str, Any], version: int = PROFILE_SCHEMA_VERSION) -> Profile:
    """A profile in the current schema (omni_cpu.profile.upgrade brings older ones to it);
    `version` is the one the file was written in, kept only to say so."""
    root = FieldReader(raw, "")
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
    if root.get("model_runner", str) != "v1":
        raise ProfileError("model_runner must be v1 (the CPU platform's runner)")
    root.get("async_chunk", bool)
    env = omni.get("env", dict)
    for key, value in env.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ProfileError(f"omni_cpu.env.{key} must be a string (quote it)")
    if "LD_PRELOAD" in env:
        raise ProfileError(
            "omni_cpu.env.LD_PRELOAD is a path of one machine",
            f"name the libraries in omni_cpu.preload ({', '.join(PRELOAD_NAMES)}): "
            "each is found at start in the runtime that runs",
        )
    _check_env_values(env)
    sizes = _stage_sizes(root)
    chosen, env = stage_choices(root, dict(env), sorted(sizes))
    machine = omni.child("machine")
    node_of = stamp_node_of(machine.data)
    replicas = [
        _replica(replica, position, sizes, chosen, node_of)
        for position, replica in enumerate(omni.items("replicas"))
    ]
    if not replicas:
        raise ProfileError("omni_cpu.replicas lists no replica")
    profile = Profile(
        generated_by=omni.get("generated_by", str),
        machine=read_machine(machine),
        model=omni.get("model", str),
        model_kind=omni.get("model_kind", str, optional=True) or "",
        dtype=replicas[0].talker.dtype,
        streaming=read_streaming(root),
        replicas=tuple(replicas),
        env=dict(env),
        notes=tuple(str(note) for note in omni.get("notes", list)),
        capacity=read_capacity(omni.child("capacity")) if "capacity" in omni.data else None,
        preload=_preload(omni),
        schema_version=version,  # as read; written back in the current schema
    )
    _check_platforms(root)
    return profile


def _replica(
    replica: FieldReader,
    position: int,
    sizes: dict[int, dict[str, Any]],
    chosen: dict[int, dict[str, str]],
    node_of: dict[int, int],
) -> Replica:
    """One replica: its stages placed by their CPUs (schema 5), replica 0's sizes from the
    deploy config's `stages:`, their one home."""
    replica.only("index", "numa_node", "frontend_cpus", "spanning", "stages", "capacity")
    stages = []
    for stage in replica.items("stages"):
        stage_id = stage.non_negative("stage_id")
        if stage_id not in sizes:
            raise ProfileError(f"{stage.path}.stage_id {stage_id} has no entry in stages")
        own = _replica_stage_sizes(stage, sizes[stage_id], sized_below=position == 0)
        stages.append(
            StagePlan(
                stage_id=stage_id,
                cpus=stage.cpu_list("cpus"),
                choices=chosen[stage_id],
                **own,
                **_placement(stage, node_of),
            )
        )
    talker = next((s for s in stages if s.stage_id == TALKER_STAGE), stages[0] if stages else None)
    if "numa_node" in replica.data or talker is None:
        numa_node = replica.non_negative("numa_node")
    else:  # the home is the talker's node
        numa_node = talker.numa_node
    return Replica(
        index=replica.non_negative("index"),
        numa_node=numa_node,
        frontend_cpus=replica.cpu_list("frontend_cpus", allow_empty=True),
        stages=tuple(stages),
        capacity=read_replica_capacity(replica) if "capacity" in replica.data else None,
        spanning=bool(replica.get("spanning", bool, optional=True)),
    )


def _placement(stage: FieldReader, node_of: dict[int, int]) -> dict[str, Any]:
    """A stage's node and memory nodes: its first CPU's node on the machine's node list
    (bound again at start on the facts there, omni_cpu.plan.bind), its memory there unless
    `memory_nodes` says otherwise (a memoryless node's, a spanning replica's)."""
    if "numa_node" in stage.data:
        raise ProfileError(
            f"{stage.path}.numa_node: a stage's node follows from its cpus (schema 5)",
            "remove the line; write memory_nodes only for memory on other nodes",
        )
    memory_nodes = stage.get("memory_nodes", str, optional=True)
    if memory_nodes is not None:
        try:
            if not parse_cpu_list(memory_nodes):
                raise ProfileError(f"{stage.path}.memory_nodes names no node")
        except CpuListError as bad:
            raise ProfileError(f"{stage.path}.memory_nodes: {bad}", "write e.g. 0 or 0-1") from None
    node = first_cpu_node(stage.data.get("cpus"), node_of)
    if node is None:  # its CPUs are not on the node list: its memory's first node
        node = parse_cpu_list(memory_nodes)[0] if memory_nodes else 0
    return {"numa_node": node, "memory_nodes": memory_nodes or str(node)}


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


def _replica_stage_sizes(
    stage: FieldReader, top: dict[str, Any], sized_below: bool
) -> dict[str, Any]:
    """A replica's stage carries its own sizes; settings are shared. Replica 0 takes them
    from the deploy config's entry (`top`), their one home."""
    placement = ("stage_id", "name", "cpus", "smt_siblings", "numa_node", "memory_nodes")
    stage.only(*placement, *(() if sized_below else SIZE_KEYS))
    if sized_below:
        sizes = {key: top[key] for key in SIZE_KEYS}
    else:
        dtype = stage.get("dtype", str)
        if dtype not in DTYPES:
            raise ProfileError(
                f"{stage.path}.dtype must be one of {', '.join(DTYPES)}, not {dtype}"
            )
        sizes = _sizes(stage, dtype)
    return {
        "smt_siblings": bool(stage.get("smt_siblings", bool, optional=True)),
        **sizes,
        "settings": top["settings"],
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


def load_profile(path: str | Path) -> Profile:
    """Read and check a profile file (or a pipe that sends one)."""
    path = Path(path)
    return parse_profile(read_profile_text(path), str(path))
