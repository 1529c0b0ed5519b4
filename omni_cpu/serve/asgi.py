"""The ASGI pieces admission is made of: types, the OpenAI error shape, a refusal, a replay,
a reply held until its body is whole."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

ERROR_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    408: "RequestTimeoutError",
    413: "RequestEntityTooLargeError",
    429: "RateLimitError",
    503: "ServiceUnavailableError",
    504: "TimeoutError",
}


class BadBody(Exception):
    """A request refused before the server sees it: its status and one-line message."""

    def __init__(self, status: int, message: str, param: str | None, reason: str) -> None:
        super().__init__(message)
        self.status = status
        self.param = param
        self.reason = reason  # the rejected counter's label


def error_body(message: str, error_type: str, code: int, param: str | None = None) -> bytes:
    """vLLM's JSON error shape, so OpenAI clients raise the matching exception."""
    error = {"message": message, "type": error_type, "param": param, "code": code}
    return json.dumps({"error": error}).encode()


async def send_json(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]
) -> None:
    """Answer a request with a complete JSON response."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def refuse(send: Send, bad: BadBody) -> None:
    """Answer `bad` in the OpenAI error shape; a 408 also closes the connection."""
    error_type = ERROR_TYPES.get(bad.status, "BadRequestError")
    # The client may still be sending a body nobody will read: end the connection.
    headers = [(b"connection", b"close")] if bad.status in (408, 413) else []
    await send_json(
        send, bad.status, error_body(str(bad), error_type, bad.status, bad.param), headers
    )


def replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that hands the already-read body to the app, then defers to the client."""
    sent = False

    async def receive_again() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return receive_again


def held_reply(
    status: int, send: Send, instead: Callable[[Message, bytes], Awaitable[bool]]
) -> Send:
    """A `send` that holds a reply of `status` until its body is whole, then offers it to
    `instead` (its start message and body): True when `instead` sent a reply of its own,
    False to send the held one as it was. Every other reply passes straight through."""
    held: list[Message] = []

    async def send_held(message: Message) -> None:
        if message["type"] == "http.response.start" and message.get("status") == status:
            held.append(message)
            return
        if not held:
            await send(message)
            return
        held.append(message)
        if message.get("more_body", False):
            return
        start, *parts = held
        if not await instead(start, b"".join(part.get("body", b"") for part in parts)):
            for kept in held:
                await send(kept)

    return send_held
