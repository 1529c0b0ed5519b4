"""An uploaded voice's multipart form, read the way vLLM-Omni will read it (starlette)."""

from __future__ import annotations

import json
import math
from typing import Any

from omni_cpu.serve.asgi import BadBody, Message, Scope
from omni_cpu.serve.strings import judge_strings


def is_multipart(scope: Scope) -> bool:
    for name, value in scope.get("headers", []):
        if name.lower() == b"content-type":
            return value.lower().startswith(b"multipart/")
    return False


async def form_file(scope: Scope, body: bytes, field: str) -> bytes | None:
    """The bytes of the file a multipart form sends as `field`, None if it sends none.

    Raises BadBody for a form starlette cannot read, for a text field or file name that
    cannot pass the door (omni_cpu.serve.strings), and for a `speaker_embedding` (the
    other way to upload a voice) that is not a list of finite numbers.
    """
    from starlette.requests import Request

    async def receive() -> Message:
        return {"type": "http.request", "body": body, "more_body": False}

    request = Request(dict(scope), receive)
    try:
        form = await request.form(max_files=2, max_fields=16)
    except Exception as error:  # starlette's parser refuses what it cannot read
        raise BadBody(400, f"cannot read the form: {error}", field, "bad_form") from None
    try:
        for key, value in form.multi_items():
            judge_strings({key: value if isinstance(value, str) else {"filename": value.filename}})
        judge_embedding(form.get("speaker_embedding"))
        upload = form.get(field)
        if upload is None or isinstance(upload, str):
            return None
        return await upload.read()
    finally:
        await form.close()


def judge_embedding(text: Any) -> None:
    """Refuse (BadBody) a `speaker_embedding` that is not a list of finite numbers."""
    if not isinstance(text, str):
        return
    try:
        values = json.loads(text)
    except ValueError:
        return  # vLLM-Omni answers malformed JSON itself
    finite = isinstance(values, list) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values
    )
    if not finite:
        raise BadBody(
            400,
            "speaker_embedding must be a JSON list of finite numbers (no NaN or infinity)",
            "speaker_embedding",
            "ref_audio",
        )
