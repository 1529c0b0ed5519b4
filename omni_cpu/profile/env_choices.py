"""Choices written in `omni_cpu.env` (`OMNI_CPU_WEIGHTS: int4`): each belongs to the stage
that reads it, and the stage's entry (omni_cpu.profile.choices) is its home."""

from __future__ import annotations

from omni_cpu import envs
from omni_cpu.errors import ProfileError, SettingError
from omni_cpu.profile import choices
from omni_cpu.profile.fields import FieldReader


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
