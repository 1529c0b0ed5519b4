"""Schema upgrades: a profile written by an older omni-cpu, as today's schema says it.

Each step is a function on the parsed YAML mapping, from one version to the next
(`v1_to_v2` ... `v4_to_v5`); `upgrade` runs the ones a file needs, in order, and the
one reader (omni_cpu.profile.reader) then reads only the current schema. A step keeps
every reviewed value: it moves a value to its new home, or drops one only where the
current schema derives the very same value (and checks that it does).
"""

from __future__ import annotations

import copy
import dataclasses
import os
from collections.abc import Callable
from typing import Any

from omni_cpu.cpulist import parse_cpu_list
from omni_cpu.errors import CpuListError, ProfileError
from omni_cpu.profile import choices
from omni_cpu.profile.deploy import OPENMP_BINDING_KEYS, SIZE_KEYS, stage_env
from omni_cpu.profile.fields import FieldReader
from omni_cpu.profile.model import (
    PROFILE_SCHEMA_VERSION,
    READABLE_SCHEMA_VERSIONS,
    TALKER_STAGE,
    Profile,
)

Raw = dict[str, Any]
# The one reader of the current schema (omni_cpu.profile.reader.read_current), handed to
# each step so that a step dropping a derived block can check it said what is derived.
ReadCurrent = Callable[[Raw, int], Profile]


def schema_version(raw: Any) -> int:
    """The `omni_cpu.schema_version` a parsed file states, if this omni-cpu reads it."""
    version = FieldReader(raw, "").child("omni_cpu").get("schema_version", int)
    if version not in READABLE_SCHEMA_VERSIONS:
        raise ProfileError(
            f"omni_cpu.schema_version {version} is not supported (this omni-cpu reads "
            f"{', '.join(map(str, READABLE_SCHEMA_VERSIONS))})",
            "regenerate the profile with `omni-cpu probe --output FILE`",
        )
    return version


def upgrade(raw: Any, read: ReadCurrent) -> tuple[Raw, int]:
    """`raw` (a parsed profile) in the current schema, and the version it was written in.

    The caller's mapping is not changed.
    """
    version = schema_version(raw)
    return upgrade_from(version, copy.deepcopy(raw), read), version


def upgrade_from(version: int, raw: Raw, read: ReadCurrent) -> Raw:
    """Run every step from `version` to the current one on `raw` (changed in place)."""
    for step in STEPS[version - 1 :]:
        raw = step(raw, read)
    raw["omni_cpu"]["schema_version"] = PROFILE_SCHEMA_VERSION
    return raw


def _omni(raw: Raw) -> dict[str, Any]:
    return FieldReader(raw, "").child("omni_cpu").data


def _replicas(raw: Raw) -> list[FieldReader]:
    return FieldReader(_omni(raw), "omni_cpu").items("replicas")


def _top_stages(raw: Raw) -> dict[int, dict[str, Any]]:
    """The deploy config's stage entries by stage_id (replica 0's sizes)."""
    return {
        stage.non_negative("stage_id"): stage.data for stage in FieldReader(raw, "").items("stages")
    }


def v1_to_v2(raw: Raw, read: ReadCurrent) -> Raw:
    """Schema 1: one `stages:` block sized every replica; the replica's node held its
    memory. Schema 2: each replica's stage carries its sizes, node and memory nodes."""
    top = _top_stages(raw)
    for replica in _replicas(raw):
        numa_node = replica.non_negative("numa_node")
        for stage in replica.items("stages"):
            stage.only("stage_id", "name", "cpus")
            sizes = top.get(stage.non_negative("stage_id"), {})
            stage.data.update({key: sizes[key] for key in SIZE_KEYS if key in sizes})
            stage.data.update(numa_node=numa_node, memory_nodes=str(numa_node))
    return raw


def v2_to_v3(raw: Raw, read: ReadCurrent) -> Raw:
    """Schema 3: each stage entry says its choices (`additional_config: {omni_cpu: ...}`);
    schema 2 carried them in `omni_cpu.env`. Each moves to the stage that reads it; one
    its entry already names stays, for the reader to check that both say the same."""
    omni = FieldReader(_omni(raw), "omni_cpu")
    env = omni.get("env", dict)
    top = _top_stages(raw)
    for key in [key for key in env if key in choices.STAGE_OF]:
        stage = top.get(choices.STAGE_OF[key])
        if stage is None:
            continue
        config = stage.setdefault("additional_config", {})
        entry = config.setdefault(choices.KEY, {}) if isinstance(config, dict) else None
        name = choices.NAME_OF[key]
        if isinstance(entry, dict) and name not in entry:
            entry[name] = env.pop(key)
    return raw


def v3_to_v4(raw: Raw, read: ReadCurrent) -> Raw:
    """Schema 4: one home per value, nothing of the planning machine's. Replica 0's sizes
    live in the deploy config's `stages:` alone; the libraries to preload are named, not
    an LD_PRELOAD path; each stage's environment is derived at start, not written (the
    written one must say what is derived)."""
    omni = _omni(raw)
    env = FieldReader(omni, "omni_cpu").get("env", dict)
    omni["env"], omni["preload"], paths = preload_from_env(dict(env))
    _drop_replica_zero_sizes(raw)
    platforms = FieldReader(raw, "").child("platforms")
    platforms.only("cpu")
    cpu = platforms.child("cpu")
    cpu.only("model_runner", "stages")
    written = cpu.data.pop("stages", [])
    as_read = read(upgrade_from(4, copy.deepcopy(raw), read), 4)
    check_written_stage_env(FieldReader({"stages": written}, cpu.path), as_read, paths)
    return raw


def v4_to_v5(raw: Raw, read: ReadCurrent) -> Raw:
    """Schema 5: one edit moves a stage. A stage's node, its memory nodes and its
    replica's node follow from its `cpus` (on the machine's node list; at start, on the
    facts there) and are written only where they say something else; the first codec
    chunk is the ramp's first; `machine.usable_cpus` is left out where it is the
    node list's CPUs."""
    omni = _omni(raw)
    machine = FieldReader(omni, "omni_cpu").child("machine")
    node_of = stamp_node_of(machine.data)
    if "usable_cpus" in machine.data and _cpus(machine.data["usable_cpus"]) == set(node_of):
        del machine.data["usable_cpus"]
    for replica in _replicas(raw):
        homes = {}
        for stage in replica.items("stages"):
            node = first_cpu_node(stage.data.get("cpus"), node_of)
            written = stage.data.get("numa_node")
            if node is None and written is not None:  # not in the node list: memory says it
                stage.data.setdefault("memory_nodes", str(written))
            stage.data.pop("numa_node", None)
            if node is not None and _cpus(stage.data.get("memory_nodes")) == {node}:
                del stage.data["memory_nodes"]
            homes[stage.data.get("stage_id")] = node if node is not None else written
        if replica.data.get("numa_node") == homes.get(TALKER_STAGE):
            del replica.data["numa_node"]
    extra = _connector_extra(raw)
    if extra.get("codec_chunk_ramp"):  # the ramp's first chunk is the first; this did nothing
        extra.pop("initial_codec_chunk_frames", None)
    return raw


STEPS: tuple[Callable[[Raw, ReadCurrent], Raw], ...] = (v1_to_v2, v2_to_v3, v3_to_v4, v4_to_v5)
assert len(STEPS) == PROFILE_SCHEMA_VERSION - 1, "one step per schema version"


def stamp_node_of(machine: Any) -> dict[int, int]:
    """The node of each CPU in a machine block's `numa_nodes` (what it was planned on);
    {} where the block does not say (the reader names what is wrong with it)."""
    node_of: dict[int, int] = {}
    nodes = machine.get("numa_nodes") if isinstance(machine, dict) else None
    for node in nodes if isinstance(nodes, list) else ():
        if isinstance(node, dict) and isinstance(node.get("id"), int):
            for cpu in _cpus(node.get("cpus")):
                node_of.setdefault(cpu, node["id"])
    return node_of


def first_cpu_node(cpus: Any, node_of: dict[int, int]) -> int | None:
    """The node of the first CPU a `cpus` list names (vLLM binds a worker's memory to its
    first CPU's node), None where the node list does not hold it."""
    try:
        listed = parse_cpu_list(cpus) if isinstance(cpus, str) else ()
    except CpuListError:
        return None
    return node_of.get(listed[0]) if listed else None


def _cpus(text: Any) -> set[int]:
    try:
        return set(parse_cpu_list(text)) if isinstance(text, str) else set()
    except CpuListError:
        return set()


def _connector_extra(raw: Raw) -> dict[str, Any]:
    connectors = raw.get("connectors")
    connector = connectors.get("connector_of_shared_memory") if isinstance(connectors, dict) else {}
    extra = connector.get("extra") if isinstance(connector, dict) else {}
    return extra if isinstance(extra, dict) else {}


def _drop_replica_zero_sizes(raw: Raw) -> None:
    """The deploy config's `stages:` is replica 0: both places must say the same."""
    top = _top_stages(raw)
    replicas = _replicas(raw)
    for stage in replicas[0].items("stages") if replicas else ():
        stage_id = stage.non_negative("stage_id")
        for key in SIZE_KEYS:
            if stage_id not in top or key not in stage.data or key not in top[stage_id]:
                continue
            here, there = stage.data[key], top[stage_id][key]
            if here != there or type(here) is not type(there):
                raise ProfileError(
                    f"stages[{stage_id}].{key} is {there!r} but "
                    f"omni_cpu.replicas[0].stages[{stage_id}].{key} is {here!r}",
                    "edit both together, or regenerate with `omni-cpu probe --output FILE`",
                )
            del stage.data[key]


# The file names an LD_PRELOAD of schema 1-3 held, and the library each one is.
_PRELOAD_BY_FILE_PREFIX = (("libiomp", "intel-openmp"), ("libtcmalloc", "tcmalloc"))


def preload_from_env(
    env: dict[str, Any],
) -> tuple[dict[str, Any], list[str], tuple[str, ...]]:
    """Schema 1-3's `LD_PRELOAD: "/planning/machine/lib/libiomp5.so:..."` as library names.

    Returns `env` without it, the names (omni_cpu.preload) and the paths as written
    (the stage environment of those files said them too).
    """
    written = env.pop("LD_PRELOAD", "")
    if not isinstance(written, str):
        raise ProfileError("omni_cpu.env.LD_PRELOAD must be a string (quote it)")
    paths = tuple(part for part in written.replace(" ", ":").split(":") if part)
    names: list[str] = []
    for path in paths:
        base = os.path.basename(path)
        name = next(
            (name for prefix, name in _PRELOAD_BY_FILE_PREFIX if base.startswith(prefix)), None
        )
        if name is None:
            raise ProfileError(
                f"omni_cpu.env.LD_PRELOAD names {path}, a library omni-cpu does not preload "
                "by name (intel-openmp, tcmalloc)",
                "remove it from LD_PRELOAD, then run `omni-cpu profile upgrade FILE`",
            )
        if name not in names:
            names.append(name)
    return env, names, paths


def check_written_stage_env(
    platforms_cpu: FieldReader, profile: Profile, preload_paths: tuple[str, ...]
) -> None:
    """Schema 1-3 wrote each stage's environment in `platforms.cpu.stages`: it must say
    what is derived now (with the LD_PRELOAD paths those files held)."""
    profile = dataclasses.replace(profile, preload_paths=preload_paths)
    for stage in platforms_cpu.items("stages"):
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
                    "edit both together, or run `omni-cpu profile upgrade FILE` (schema 4 "
                    "derives them)",
                )
