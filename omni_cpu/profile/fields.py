"""Typed access to a parsed YAML mapping: every failure names the key path."""

from __future__ import annotations

import difflib
from typing import Any

from omni_cpu.cpulist import parse_cpu_list
from omni_cpu.errors import CpuListError, ProfileError

# 52-bit physical addresses (x86-64 and Arm's widest): 4 PiB. A size above it is a typo.
MAX_MEMORY_BYTES = 1 << 52


class FieldReader:
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
                close = difflib.get_close_matches(str(key), allowed, n=1)
                raise ProfileError(
                    f"unknown key {self._key(str(key))}",
                    (f"did you mean {close[0]}? " if close else "")
                    + "allowed here: "
                    + ", ".join(allowed),
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

    def byte_count(self, key: str, *, optional: bool = False) -> int | None:
        """A size in bytes: not negative, and no more than any machine holds."""
        if optional and self.get(key, int, optional=True) is None:
            return None
        value = self.non_negative(key)
        if value > MAX_MEMORY_BYTES:
            raise ProfileError(
                f"{self._key(key)} is {value} bytes, more than any machine holds "
                f"(at most {MAX_MEMORY_BYTES})",
                "write the bytes the stage should reserve, or regenerate the profile",
            )
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

    def child(self, key: str) -> FieldReader:
        return FieldReader(self.get(key, dict), self._key(key))

    def items(self, key: str) -> list[FieldReader]:
        values = self.get(key, list)
        return [FieldReader(item, f"{self._key(key)}[{i}]") for i, item in enumerate(values)]
