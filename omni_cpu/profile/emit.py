"""A small block-style YAML writer that puts a comment beside each field.

PyYAML cannot write comments, and a profile is reviewed in diffs, so every line
must be stable and say what it becomes. Strings are always quoted (JSON strings
are valid YAML), so `"0-5"` never turns into something else on load.
"""

from __future__ import annotations

import json
from typing import Any

COMMENT_COLUMN = 44
FLOW_LIST_MAX_WIDTH = 60


def scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value))


def _with_comment(text: str, comment: str | None) -> str:
    if not comment:
        return text
    return f"{text.ljust(COMMENT_COLUMN - 1)} # {comment}"


def _is_flat_list(value: list[Any]) -> bool:
    return all(not isinstance(item, dict | list) for item in value)


def emit_mapping(
    mapping: dict[str, Any], comments: dict[str, str], indent: int = 0, path: str = ""
) -> list[str]:
    """Lines for `mapping`; `comments` is keyed by dotted path, list items as `[]`."""
    lines: list[str] = []
    pad = " " * indent
    for key, value in mapping.items():
        here = f"{path}.{key}" if path else key
        comment = comments.get(here)
        if isinstance(value, dict) and value:
            lines.append(_with_comment(f"{pad}{key}:", comment))
            lines.extend(emit_mapping(value, comments, indent + 2, here))
        elif isinstance(value, list) and value and not _is_flat_list(value):
            lines.append(_with_comment(f"{pad}{key}:", comment))
            for item in value:
                lines.extend(_emit_list_item(item, comments, indent + 2, f"{here}[]"))
        elif isinstance(value, list):
            flow = "[" + ", ".join(scalar(item) for item in value) + "]"
            if len(pad) + len(key) + len(flow) <= FLOW_LIST_MAX_WIDTH:
                lines.append(_with_comment(f"{pad}{key}: {flow}", comment))
            else:  # long strings (notes) read better one per line
                lines.append(_with_comment(f"{pad}{key}:", comment))
                lines.extend(f"{pad}  - {scalar(item)}" for item in value)
        elif isinstance(value, dict):
            lines.append(_with_comment(f"{pad}{key}: {{}}", comment))
        else:
            lines.append(_with_comment(f"{pad}{key}: {scalar(value)}", comment))
    return lines


def _emit_list_item(item: Any, comments: dict[str, str], indent: int, path: str) -> list[str]:
    pad = " " * indent
    if not isinstance(item, dict) or not item:
        return [f"{pad}- {scalar(item) if not isinstance(item, dict) else '{}'}"]
    body = emit_mapping(item, comments, indent + 2, path)
    # The first key of the item sits on the dash line.
    first = body[0]
    body[0] = f"{pad}- {first[indent + 2 :]}"
    return body
