"""What changed between two profiles, key by key, in the order the file lists them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from omni_cpu.profile.model import Profile
from omni_cpu.profile.writer import dump_profile


@dataclass(frozen=True)
class Change:
    key: str
    before: Any  # None with `kind == "added"`
    after: Any  # None with `kind == "removed"`
    kind: str  # "added", "removed", "changed"


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    if isinstance(data, dict) and data:
        for key, value in data.items():
            flat.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    elif isinstance(data, list) and data and any(isinstance(v, dict | list) for v in data):
        for index, value in enumerate(data):
            flat.update(_flatten(value, f"{prefix}[{index}]"))
    else:
        flat[prefix] = data
    return flat


def diff_profiles(before: Profile, after: Profile) -> list[Change]:
    """Key-level changes from `before` to `after`, as each would be written to YAML."""
    old = _flatten(yaml.safe_load(dump_profile(before)))
    new = _flatten(yaml.safe_load(dump_profile(after)))
    changes: list[Change] = []
    for key in [*old, *(k for k in new if k not in old)]:
        if key not in new:
            changes.append(Change(key, old[key], None, "removed"))
        elif key not in old:
            changes.append(Change(key, None, new[key], "added"))
        elif old[key] != new[key]:
            changes.append(Change(key, old[key], new[key], "changed"))
    return changes
