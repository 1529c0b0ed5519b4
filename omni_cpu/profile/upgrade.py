"""Schema upgrades: what a profile written by an older omni-cpu means in today's terms.

Each older form is read into the same `Profile` a current file gives, keeping every
reviewed value; `save_profile` then writes it in the current schema.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from omni_cpu import envs
from omni_cpu.errors import ProfileError, SettingError
from omni_cpu.profile import choices
from omni_cpu.profile.deploy import OPENMP_BINDING_KEYS, stage_env
from omni_cpu.profile.fields import FieldReader
from omni_cpu.profile.model import Profile


def version_1_sizes(
    replica: FieldReader, stage: FieldReader, sizes: dict[str, Any]
) -> dict[str, Any]:
    """Schema 1: one `stages:` block sized every replica; the replica's node held its memory."""
    stage.only("stage_id", "name", "cpus")
    numa_node = replica.non_negative("numa_node")
    return {**sizes, "numa_node": numa_node, "memory_nodes": str(numa_node)}


def stage_choices(
    root: FieldReader, env: dict[str, str], stage_ids: list[int]
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
        FieldReader(config, where).only(choices.KEY)
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


# The file names an LD_PRELOAD of schema 1-3 held, and the library each one is.
_PRELOAD_BY_FILE_PREFIX = (("libiomp", "intel-openmp"), ("libtcmalloc", "tcmalloc"))


def preload_from_env(
    env: dict[str, str],
) -> tuple[dict[str, str], tuple[str, ...], tuple[str, ...]]:
    """Schema 1-3's `LD_PRELOAD: "/planning/machine/lib/libiomp5.so:..."` as library names.

    Returns `env` without it, the names (omni_cpu.preload) and the paths as written
    (the stage environment of those files said them too).
    """
    paths = tuple(part for part in env.pop("LD_PRELOAD", "").replace(" ", ":").split(":") if part)
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
    return env, tuple(names), paths


def check_written_stage_env(
    root: FieldReader, profile: Profile, preload_paths: tuple[str, ...]
) -> None:
    """Schema 1-3 wrote each stage's environment in `platforms.cpu`: it must say what
    omni_cpu says (with the LD_PRELOAD paths those files held)."""
    profile = dataclasses.replace(profile, preload_paths=preload_paths)
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
                    "edit both together, or run `omni-cpu profile upgrade FILE` (schema 4 "
                    "derives them)",
                )
