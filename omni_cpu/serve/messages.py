"""vLLM-Omni's refusals that mislead a user, reworded on their way out.

vLLM-Omni 0.30.0 answers a Base request naming a voice it does not have as if the name were a
built-in speaker ("Base task with built-in speaker 'x' requires 'ref_audio' ..."): the
user needs to hear that no such voice is known and what to send instead. A voice it cannot
store answers with the OS's error text, paths of the server's own folders included. Each
entry here is a pattern of vLLM-Omni's message and the message a user can act on; the
status stays.
"""

from __future__ import annotations

import json
import re

from omni_cpu.serve.asgi import Message, Send, held_reply

REWORDED = (
    (
        re.compile(r"Base task with built-in speaker '(?P<voice>.*)' requires 'ref_audio'"),
        "voice '{voice}' is not a voice this server has (GET /v1/audio/voices lists them); "
        "upload it first (POST /v1/audio/voices), or send ref_audio with ref_text",
    ),
    (
        re.compile(r"\[Errno 28\]|No space left on device"),
        "the server has no room left to store this voice; retry later, or remove a voice "
        "(DELETE /v1/audio/voices/NAME)",
    ),
    (
        re.compile(r"\[Errno \d+\]"),
        "the server could not store this voice (its log says why); retry later",
    ),
)


def reworded(body: bytes) -> bytes | None:
    """`body` (an OpenAI error) with its message reworded, or None when none applies."""
    try:
        data = json.loads(body)
        message = data["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(message, str):
        return None
    for pattern, wording in REWORDED:
        found = pattern.search(message)
        if found is not None:
            data["error"]["message"] = wording.format(**found.groupdict())
            return json.dumps(data).encode()
    return None


def rewording(send: Send) -> Send:
    """A `send` that rewords a 400's message (omni_cpu.serve.messages.REWORDED)."""

    async def reword(start: Message, body: bytes) -> bool:
        new = reworded(body)
        if new is None:
            return False
        headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(new)).encode()))
        await send({**start, "headers": headers})
        await send({"type": "http.response.body", "body": new, "more_body": False})
        return True

    return held_reply(400, send, reword)
