"""Every string a request carries, checked at the door before the engine sees it.

JSON can carry text Python holds but cannot encode as UTF-8 (a lone surrogate,
`"\\ud800"`): vLLM-Omni's request dispatch fails on it and takes a stage down. NUL and
the other control characters are no part of speech text and, in a name (a voice, a
language), end up in logs, headers and file names. So every string in a body (keys
too) is refused with a 400 naming the field when it holds a surrogate or a control
character; tab, line feed and carriage return are allowed only in free text.
"""

from __future__ import annotations

import re
from typing import Any

from omni_cpu.serve.asgi import BadBody

# Fields whose text is spoken or describes speech, and the model's own parameters (stop
# strings may be line breaks): line breaks and tabs belong there.
FREE_TEXT = frozenset(
    {
        "input",
        "instructions",
        "ref_text",
        "text",
        "ambient_sound",
        "speaker_description",
        "extra_params",
    }
)

_SURROGATE = re.compile("[\ud800-\udfff]")
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_CONTROL_IN_NAME = re.compile("[\x00-\x1f\x7f-\x9f]")


def string_problem(text: str, free_text: bool) -> str | None:
    """Why `text` cannot pass the door, or None."""
    found = _SURROGATE.search(text)
    if found is not None:
        return (
            f"holds a lone surrogate (U+{ord(found.group()):04X}), which is not text "
            "UTF-8 can carry; send valid Unicode"
        )
    found = (_CONTROL if free_text else _CONTROL_IN_NAME).search(text)
    if found is not None:
        return f"holds a control character (U+{ord(found.group()):04X}); remove it"
    return None


def _named(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def judge_strings(data: Any, where: str = "") -> None:
    """Refuse (BadBody 400, naming the field) any string in `data` that cannot pass the door.

    `data` is a parsed JSON value; `where` names it ("" for a whole body). Walks
    without recursion (bodies are already bounded in depth).
    """
    stack: list[tuple[Any, str, bool]] = [(data, where, False)]
    while stack:
        item, name, free_text = stack.pop()
        if isinstance(item, str):
            problem = string_problem(item, free_text)
            if problem is not None:
                field = name or "the request body"
                raise BadBody(400, f"{field} {problem}", name or None, "bad_text")
        elif isinstance(item, dict):
            for key, value in item.items():
                key_text = str(key)
                problem = string_problem(key_text, free_text=False)
                if problem is not None:
                    field = f"a field name in {name or 'the request body'}"
                    raise BadBody(400, f"{field} {problem}", name or None, "bad_text")
                free = free_text or key_text in FREE_TEXT  # all that a free-text field holds
                stack.append((value, _named(name, key_text), free))
        elif isinstance(item, list):
            stack.extend((value, f"{name}[{index}]", free_text) for index, value in enumerate(item))
