"""A request body read within bounds (size, time) and its JSON judged safe to parse."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from omni_cpu import envs
from omni_cpu.checkpoint.geometry import SAMPLE_RATE
from omni_cpu.serve.asgi import BadBody, Receive, Scope

# Deeper than any speech request needs; vLLM's parser would recurse past Python's limit.
MAX_JSON_DEPTH = 32


def json_depth(data: Any) -> int:
    """How deeply lists and objects nest in `data` (0 for a scalar), without recursion."""
    deepest = 0
    stack = [(data, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > MAX_JSON_DEPTH:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest


# Python refuses to read an integer literal of more digits (sys.get_int_max_str_digits), and
# vLLM-Omni would answer that in a shape of its own; no field of this API takes one.
MAX_INT_DIGITS = 4300


def _whole_number(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise BadBody(
            400,
            f"request body has a number of {digits} digits; numbers in this API fit in 64 bits",
            None,
            "invalid",
        )
    return int(text)


def parse_fields(body: bytes) -> dict[str, Any]:
    """The request's JSON object, {} when it is not one (vLLM answers malformed JSON itself).

    Raises BadBody for JSON nested too deeply to parse safely.
    """
    too_deep = BadBody(
        400,
        f"request body nests deeper than {MAX_JSON_DEPTH} levels; send a flat JSON object",
        None,
        "too_deep",
    )
    try:
        data = json.loads(body, parse_int=_whole_number)
    except RecursionError:
        raise too_deep from None
    except (ValueError, UnicodeDecodeError):
        return {}
    if json_depth(data) > MAX_JSON_DEPTH:
        raise too_deep
    return data if isinstance(data, dict) else {}


def reply_sample_rate(fields: dict[str, Any]) -> int:
    """The rate a speech request's audio comes at: its `sample_rate`, else the model's."""
    rate = fields.get("sample_rate")
    if isinstance(rate, int) and not isinstance(rate, bool) and rate > 0:
        return rate
    return SAMPLE_RATE


def content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def read_limited_body(
    scope: Scope, receive: Receive, limit: int, timeout_s: float = 0.0
) -> tuple[bytes, bool]:
    """The whole body and whether the client left while sending it.

    Raises BadBody(413) past `limit` bytes and BadBody(408) when the body is not all
    in within `timeout_s` of its headers (0 = no limit on either): a client that
    sends a little and then nothing must not hold the server's attention for ever.
    """
    too_big = BadBody(
        413,
        f"request body is over this server's {limit} byte limit (send a shorter clip)",
        None,
        "too_large",
    )
    declared = content_length(scope)
    if limit and declared is not None and declared > limit:
        raise too_big
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s if timeout_s else None
    chunks: list[bytes] = []
    size = 0
    while True:
        if deadline is None:
            message = await receive()
        else:
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                raise BadBody(
                    408,
                    f"the request body did not arrive within {timeout_s:g} s "
                    f"(send it whole, or raise {envs.SERVE_BODY_TIMEOUT_S.name})",
                    None,
                    "body_timeout",
                ) from None
        if message["type"] == "http.disconnect":
            return b"".join(chunks), True
        chunk = message.get("body", b"")
        size += len(chunk)
        if limit and size > limit:
            raise too_big
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), False
