"""Every field vLLM-Omni 0.30.0 reads reference audio (or the words it speaks) from: one table.

Admission judges each audio field here by the same rules (the URL policy, a `data:`
URL's MIME type and base64, a `file://` path under `--ref-audio-dir`, size, duration
and channels bounded before decoding) and each text field as a string at the door
(omni_cpu.serve.strings). A field missing here would be a way around admission:
vLLM-Omni's `references` alias is copied into `ref_audio` *after* validation, so a
check of `ref_audio` alone never saw it. tests/serve/test_reference_fields.py builds
vLLM-Omni's own request models and fails on an audio field this table does not name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Any


class Holds(Enum):
    """What a reference field carries."""

    AUDIO = "audio"  # a URL, a data: URL or a file:// path the server resolves
    TEXT = "text"  # the words of the reference
    UPLOAD = "upload"  # a multipart file (the voice upload)


@dataclass(frozen=True)
class ReferenceField:
    """One field vLLM-Omni reads for a reference: its path in a body, and who reads it."""

    path: str  # "ref_audio", "references[].audio_path" ([] is every item of a list)
    holds: Holds
    read_by: str


REFERENCE_FIELDS = (
    ReferenceField(
        "ref_audio",
        Holds.AUDIO,
        "speech, batch and batch items, the WebSocket session.config: the clone's reference "
        "(a string; a list of strings on the speech route)",
    ),
    ReferenceField(
        "ref_audio_2",
        Holds.AUDIO,
        "speech: a second speaker's reference for two-speaker models (Qwen3-TTS ignores it; "
        "it is judged all the same, since another model's adapter fetches it)",
    ),
    ReferenceField(
        "references[].audio_path",
        Holds.AUDIO,
        "speech: the `references` alias, copied into ref_audio by the request model",
    ),
    ReferenceField("ref_text", Holds.TEXT, "speech, batch and items, session.config, upload"),
    ReferenceField("references[].text", Holds.TEXT, "speech: the alias, copied into ref_text"),
    ReferenceField("audio_sample", Holds.UPLOAD, "POST /v1/audio/voices: the uploaded voice"),
)

# The request models' validators that move a reference into another field: what each moves.
ALIAS_VALIDATORS = {"normalize_references_alias": "references[].audio_path"}


def _values(data: Any, path: str, name: str) -> list[tuple[str, Any]]:
    """(the field's name in messages, its value) for each value at `path` in `data`."""
    head, dot, rest = path.partition(".")
    every = head.endswith("[]")
    key = head.removesuffix("[]")
    if not isinstance(data, dict) or key not in data:
        return []
    value = data[key]
    here = f"{name}{key}"
    if every:
        if not isinstance(value, list):
            return [(here, value)] if not dot else []
        items = [(f"{here}[{index}]", item) for index, item in enumerate(value)]
    else:
        items = [(here, value)]
    if not dot:
        return items
    return [found for where, item in items for found in _values(item, rest, f"{where}.")]


def set_value(data: dict[str, Any], name: str, value: Any) -> None:
    """Put `value` at the field `name` ("references[0].audio_path") of `data`."""
    steps: list[str | int] = [
        int(step[1:-1]) if step.startswith("[") else step
        for step in re.findall(r"\[\d+\]|[^.\[\]]+", name)
    ]
    here: Any = data
    for step in steps[:-1]:
        here = here[step]
    here[steps[-1]] = value


def audio_values(fields: dict[str, Any]) -> list[tuple[str, str]]:
    """(field name, value) of every reference audio string a request names.

    A list (`ref_audio` may be one) gives each item, named `ref_audio[0]`; values that
    are not strings are left to vLLM-Omni's validation, which refuses them.
    """
    found: list[tuple[str, str]] = []
    for field in REFERENCE_FIELDS:
        if field.holds is not Holds.AUDIO:
            continue
        for name, value in _values(fields, field.path, ""):
            if isinstance(value, list):
                items = [(f"{name}[{index}]", item) for index, item in enumerate(value)]
            else:
                items = [(name, value)]
            found.extend((where, item) for where, item in items if isinstance(item, str))
    return found


# The request models' validators that refuse or adjust values but move no reference.
CHECKING_VALIDATORS = frozenset(
    {
        "reject_higgs_audio_v2_unsupported_aliases",
        "validate_embedding_constraints",
        "validate_streaming_constraints",
    }
)
