"""A request in flight, supervised: a stage that goes down, a deadline that passes.

The supervisor (omni_cpu.serve.supervisor) writes a file naming a dead stage and
another while the server drains; admission reads both here, and every refusal for a
down stage is the one reply `reply_stage_down` writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import Protocol

from omni_cpu.serve.asgi import (
    ASGIApp,
    Message,
    Receive,
    Scope,
    Send,
    error_body,
    held_reply,
    send_json,
)
from omni_cpu.serve.counting import count_rejected
from omni_cpu.serve.knobs import AdmissionLimits


def stage_down(down_file: str) -> str | None:
    """What the supervisor wrote in `down_file` when a stage died, or None while all are up."""
    if not down_file:
        return None
    try:
        with open(down_file) as handle:
            return handle.read().strip() or "a stage is down"
    except OSError:
        return None


def draining(drain_file: str) -> bool:
    """Whether the supervisor has asked the server to drain."""
    return bool(drain_file) and os.path.exists(drain_file)


async def reply_stage_down(send: Send, down: str) -> None:
    """503 naming the down stage, with a retry hint: the one answer for a stage down."""
    await send_json(
        send, 503, error_body(down, "ServiceUnavailableError", 503), [(b"retry-after", b"5")]
    )


class SlowReader(Exception):
    """The client left a reply's data untaken past the send timeout: its stream is cut."""


class Watched(Protocol):
    """What supervision asks of admission (omni_cpu.serve.admission.SpeechAdmission)."""

    app: ASGIApp
    limits: AdmissionLimits
    watch_s: float
    down_wait_s: float

    def stage_down(self) -> str | None: ...
    def client_waits(self, change: int) -> None: ...


async def answer(
    gate: Watched, scope: Scope, receive: Receive, send: Send, timeout_s: float
) -> None:
    """Let the server answer; end the request if a stage goes down or its deadline passes.

    Not answered yet: 503 (a stage is down) or 504 (the deadline). A stream already
    under way ends: cleanly at its deadline (the audio so far is what was asked
    for), cut when a stage is down (a client must not take it for complete), and cut
    when its client leaves data untaken for `send_timeout_s` (a reader that never
    reads would hold its place, and lock others out, for as long as it stays).
    """
    started = False
    cut = False  # the client left data untaken past the send timeout
    send_timeout_s = gate.limits.send_timeout_s

    async def send_tracked(message: Message) -> None:
        nonlocal started, cut
        if cut:
            raise SlowReader
        if message["type"] == "http.response.start":
            started = True
        # A client that reads slowly holds its request here, not the engine.
        gate.client_waits(+1)
        try:
            await asyncio.wait_for(send(message), send_timeout_s or None)
        except TimeoutError:
            cut = True
            count_rejected("slow_reader")
            raise SlowReader from None
        finally:
            gate.client_waits(-1)

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s if timeout_s else None
    task = asyncio.ensure_future(gate.app(scope, receive, stage_aware(gate, send_tracked)))
    try:
        while True:
            # A deadline sooner than the next look is kept to, however short.
            wait_s = gate.watch_s if deadline is None else min(gate.watch_s, deadline - loop.time())
            done, _ = await asyncio.wait({task}, timeout=max(0.0, wait_s))
            if done:
                if cut:  # its place goes back; the server closes the connection
                    with contextlib.suppress(Exception):
                        task.result()
                    return
                task.result()
                return
            down = gate.stage_down()
            late = deadline is not None and loop.time() >= deadline
            if down is None and not late:
                continue
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            if down is not None:
                count_rejected("stage_down")
                if not started:
                    await reply_stage_down(send, down)
                return  # a started stream is left incomplete: the server cuts it
            count_rejected("timeout")
            if started:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                return
            message = (
                f"the request took longer than its {timeout_s:g} s deadline "
                "(raise the request's timeout, or serve --request-timeout)"
            )
            await send_json(send, 504, error_body(message, "TimeoutError", 504), [])
            return
    finally:
        if not task.done():
            task.cancel()


def stage_aware(gate: Watched, send: Send) -> Send:
    """A `send` that turns the server's 500 into 503 when a stage has just died.

    vLLM-Omni answers 500 ("no live replica") from the moment a stage dies until the
    supervisor has noticed (within a second) and written the down file.
    """

    async def when_down(_start: Message, body: bytes) -> bool:
        down = await down_soon(gate, body)
        if down is None:
            return False
        await reply_stage_down(send, down)
        return True

    return held_reply(500, send, when_down)


async def down_soon(gate: Watched, body: bytes) -> str | None:
    """The down stage, waiting briefly for the supervisor to name it; None if none."""
    deadline = asyncio.get_running_loop().time() + gate.down_wait_s
    while True:
        down = gate.stage_down()
        if down is not None:
            return down
        if asyncio.get_running_loop().time() >= deadline:
            break
        await asyncio.sleep(0.05)
    if b"no live replica" in body:
        return "a stage has no live replica; retry on another replica"
    return None
