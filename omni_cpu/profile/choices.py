"""What a stage runs with besides its sizes: the talker's weight format, code predictor,
GEMV and AMX rows; code2wav's decode. One home each: the stage's entry of the profile.

A deploy config's stage entry says them under vLLM's own `additional_config`
(`additional_config: {omni_cpu: {weights: int8, ...}}`), which vLLM-Omni hands to that
stage's engine as `vllm_config.additional_config`, so `omni-cpu run --deploy-profile X`
and `vllm serve MODEL --omni --deploy-config X` start the stage with the same choices.
The stage's worker installs its entry at start (omni_cpu.platform.workers); every
reader in the stage asks `value(knob)`.

The knob's environment variable, where set, overrides the entry and wins: it stays for
experiments (a kernel test forcing the AVX2 build, an A/B run), and `omni-cpu run`
names each override it passes on. Without either, the knob's default.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from omni_cpu import envs
from omni_cpu.errors import ProfileError, SettingError

# The key of `additional_config` that omni-cpu reads; vLLM and vLLM-Omni ignore it.
KEY = "omni_cpu"

# Each stage's choices, by their name in its entry. Code2wav runs no GEMV.
STAGE_KNOBS: dict[int, dict[str, envs.Knob]] = {
    0: {
        "weights": envs.WEIGHTS,
        "code_predictor": envs.CODE_PREDICTOR,
        "gemv": envs.GEMV,
        "amx_rows": envs.AMX_ROWS,
    },
    1: {"code2wav": envs.CODE2WAV},
}
NAME_OF = {knob.name: name for knobs in STAGE_KNOBS.values() for name, knob in knobs.items()}
STAGE_OF = {knob.name: stage for stage, knobs in STAGE_KNOBS.items() for knob in knobs.values()}


def defaults(stage_id: int) -> dict[str, str]:
    """Every choice of a stage at its knob's default (a stage with none: {})."""
    return {name: knob.default for name, knob in STAGE_KNOBS.get(stage_id, {}).items()}


def for_stage(stage_id: int, chosen: Mapping[str, str]) -> dict[str, str]:
    """A stage's whole entry: its defaults, with what `chosen` names for this stage."""
    own = STAGE_KNOBS.get(stage_id, {})
    return {**defaults(stage_id), **{name: text for name, text in chosen.items() if name in own}}


def _text(value: Any) -> str | None:
    """A YAML scalar as the text a knob reads (an int row count is fine); None if not one."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    return str(value)


def check_entry(entry: Any, stage_id: int, where: str) -> dict[str, str]:
    """A stage entry's `omni_cpu` choices as texts; ProfileError naming the key otherwise."""
    if not isinstance(entry, dict):
        raise ProfileError(f"{where} must be a mapping, not {type(entry).__name__}")
    own = STAGE_KNOBS.get(stage_id, {})
    checked = {}
    for name, value in entry.items():
        if name not in own:
            allowed = ", ".join(own) or "nothing"
            raise ProfileError(f"unknown key {where}.{name}", f"allowed here: {allowed}")
        text = _text(value)
        if text is None:
            raise ProfileError(f"{where}.{name} must be a string (quote it), not {value!r}")
        try:
            own[name].read(text, f"{where}.{name}")
        except SettingError as bad:
            raise ProfileError(bad.args[0], bad.fix) from None
        checked[name] = text
    return checked


def resolve(
    knob: envs.Knob, entry: Mapping[str, str], environ: Mapping[str, str] | None = None
) -> Any:
    """A stage's choice: `environ`'s override (default: this process's), else `entry`'s, else
    the knob's default. The one answer to "what does this stage run with"."""
    env = os.environ if environ is None else environ
    raw = env.get(knob.name, "")
    if raw.strip():
        return knob.read(raw)
    name = NAME_OF[knob.name]
    if name in entry:
        return knob.read(entry[name], f"additional_config.{KEY}.{name}")
    return knob.read(knob.default)


def as_env(entry: Mapping[str, str], stage_id: int) -> dict[str, str]:
    """The entry's choices that are not the defaults, as the variables that override them."""
    own = STAGE_KNOBS.get(stage_id, {})
    return {
        own[name].name: text
        for name, text in entry.items()
        if name in own and own[name].read(text) != own[name].read(own[name].default)
    }


def overrides(entry: Mapping[str, str], stage_id: int, environ: Mapping[str, str]) -> list[str]:
    """One line per choice of the stage that `environ` sets to something else than `entry`."""
    lines = []
    for name, knob in STAGE_KNOBS.get(stage_id, {}).items():
        raw = environ.get(knob.name, "").strip()
        if raw and knob.read(raw) != resolve(knob, entry, {}):
            lines.append(
                f"{knob.name}={raw} in the environment overrides the profile's "
                f"stages[{stage_id}].additional_config.{KEY}.{name} "
                f"({entry.get(name, knob.default)})"
            )
    return lines


# This stage process's entry (install); empty outside a stage: the defaults apply.
_installed: dict[str, str] = {}


def install(additional_config: Mapping[str, Any] | None) -> dict[str, str]:
    """Make this stage process's choices its entry's (`vllm_config.additional_config`).

    The worker calls it once, before the model loads. Returns the entry installed.
    """
    entry = dict((additional_config or {}).get(KEY) or {})
    texts = {name: text for name, value in entry.items() if (text := _text(value)) is not None}
    _installed.clear()
    _installed.update(texts)
    return dict(_installed)


def value(knob: envs.Knob) -> Any:
    """This stage's choice for `knob`: the environment's, the installed entry's, the default."""
    return resolve(knob, _installed)
