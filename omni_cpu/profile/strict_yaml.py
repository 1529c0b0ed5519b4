"""The YAML under a profile, read strictly: size limit, no aliases, no key given twice, pipes.

A file over `MAX_PROFILE_BYTES`, a key given twice (YAML would keep the last one
silently) or an alias (`*name`: a few lines can expand to gigabytes) is refused
with its line; a pipe nobody writes to is refused instead of hanging.
"""

from __future__ import annotations

import os
import select
import stat
import time
from pathlib import Path
from typing import Any

import yaml

from omni_cpu.errors import ProfileError

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


def parse_yaml(text: str, source: str = "profile") -> tuple[Any, dict[str, int]]:
    """The data of a profile's YAML text, read strictly, and the line of each key path
    (`stages[0].max_num_seqs`: 97); ProfileError names the line and the parser's reason."""
    if len(text) > MAX_PROFILE_BYTES:
        raise _too_large(source, len(text.encode(errors="replace")))
    loader: _StrictLoader | None = None
    try:
        loader = _StrictLoader(text)
        loader.source = source
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
        return data, key_lines(node)
    except RecursionError:
        raise ProfileError(f"{source} nests too deeply to be a profile") from None
    except yaml.YAMLError as bad:
        where = getattr(bad, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        context, opened = getattr(bad, "context", None), getattr(bad, "context_mark", None)
        if context and opened is not None:
            context = f"{context} (opened at line {opened.line + 1})"
        reason = "; ".join(part for part in (context, getattr(bad, "problem", None)) if part)
        raise ProfileError(
            f"{source} is not valid YAML{line}" + (f": {reason}" if reason else "")
        ) from None
    finally:
        if loader is not None:
            loader.dispose()


def key_lines(node: Any, path: str = "") -> dict[str, int]:
    """The 1-based line of every key path under `node` (list items as `[i]`)."""
    lines: dict[str, int] = {}
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            here = f"{path}.{key_node.value}" if path else str(key_node.value)
            lines.setdefault(here, key_node.start_mark.line + 1)
            lines.update(key_lines(value_node, here))
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            here = f"{path}[{index}]"
            lines.setdefault(here, item.start_mark.line + 1)
            lines.update(key_lines(item, here))
    return lines


def read_profile_text(path: Path) -> str:
    """The text of a profile file (or of a pipe that sends one), within the size limit."""
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            return _read_pipe(path)
        if info.st_size > MAX_PROFILE_BYTES:
            raise _too_large(str(path), info.st_size)
        with path.open(encoding="utf-8") as handle:
            return handle.read(MAX_PROFILE_BYTES + 1)
    except FileNotFoundError:
        raise ProfileError(
            f"profile {path} does not exist", "create one with `omni-cpu probe --output FILE`"
        ) from None
    except (OSError, UnicodeDecodeError) as bad:
        raise ProfileError(f"cannot read profile {path}: {bad}") from None
