"""Every route vLLM-Omni's API server mounts passes admission: named in its table, or refused.

The app is built the way vLLM-Omni 0.30.0's `api_server` builds it (vLLM's app for every
task, a superset of a speech model's, then vLLM-Omni's router and its profiler's), and
each route is looked up in omni_cpu.serve.routes. A route a new vLLM-Omni adds fails
here until it is given a door.
"""

from __future__ import annotations

import asyncio
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from omni_cpu.serve.knobs import AdmissionLimits
from omni_cpu.serve.routes import ENGINE_DOORS, ROUTES, WEBSOCKET, Door, door

pytest.importorskip("prometheus_client")
from omni_cpu.serve.admission import SpeechAdmission


@cache
def mounted_routes() -> tuple[tuple[str, str], ...]:
    """(method, path) of every route of vLLM-Omni's app; WebSocket routes as WEBSOCKET."""
    api = pytest.importorskip("vllm_omni.entrypoints.openai.api_server")
    from starlette.routing import Mount, WebSocketRoute
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    args = make_arg_parser(FlexibleArgumentParser()).parse_args(["--model", "m"])
    app = api.build_openai_app(args, ("generate",))
    app.include_router(api.router)
    app.include_router(api.profiler_router)
    found: set[tuple[str, str]] = set()
    for route in app.routes:
        path = route.path
        if isinstance(route, Mount):
            found.add(("GET", path))
        elif isinstance(route, WebSocketRoute) or type(route).__name__ == "APIWebSocketRoute":
            found.add((WEBSOCKET, path))
        else:
            found |= {(method, path) for method in route.methods or () if method != "HEAD"}
    return tuple(sorted(found))


def concrete(path: str) -> str:
    return re.sub(r"\{[^/]+\}", "x", path)


def test_every_route_vllm_omni_mounts_has_a_door():
    unguarded = [f"{m} {p}" for m, p in mounted_routes() if door(m, concrete(p)) is None]
    assert not unguarded, f"routes with no door in omni_cpu.serve.routes: {unguarded}"


def test_the_speech_routes_are_among_them():
    routes = set(mounted_routes())
    assert ("POST", "/v1/audio/speech") in routes
    assert ("POST", "/v1/audio/speech/batch") in routes
    assert (WEBSOCKET, "/v1/audio/speech/stream") in routes
    assert ("POST", "/v1/audio/voices") in routes


class Recorder:
    """Stands in for vLLM-Omni: records that it was reached, answers 200."""

    def __init__(self) -> None:
        self.reached: list[str] = []

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        self.reached.append(scope["path"])
        if scope["type"] == "websocket":
            await send({"type": "websocket.accept"})
            await send({"type": "websocket.close", "code": 1000})
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


async def knock(app: Any, method: str, path: str) -> dict:
    """One request (or WebSocket connect) through `app`; the first answer it sent."""
    sent: list[dict] = []
    body = json.dumps({"model": "m", "input": "Hi.", "items": [{"input": "Hi."}]}).encode()
    kind = "websocket" if method == WEBSOCKET else "http"

    async def receive() -> dict:
        if kind == "websocket":
            if not sent:
                return {"type": "websocket.connect"}
            await asyncio.sleep(10)
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": kind, "path": path, "method": method, "headers": []}
    await asyncio.wait_for(app(scope, receive, send), 5)
    closing = [m for m in sent if m["type"] in ("websocket.close", "http.response.start")]
    return closing[0]


def test_every_engine_route_is_refused_while_the_server_drains(tmp_path: Path):
    flag = tmp_path / "draining"
    flag.touch()
    inner = Recorder()
    app = SpeechAdmission(inner, AdmissionLimits(drain_file=str(flag)))
    engine = [(m, p) for m, p in mounted_routes() if door(m, concrete(p)) in ENGINE_DOORS]
    assert len(engine) == 4
    for method, path in engine:
        answer = asyncio.run(knock(app, method, concrete(path)))
        if method == WEBSOCKET:
            assert answer["code"] == 1012 and "draining" in answer["reason"], answer
        else:
            assert answer["status"] == 503, (method, path, answer)
    assert inner.reached == []


def test_every_route_that_is_not_speech_is_404_before_the_server():
    inner = Recorder()
    app = SpeechAdmission(inner, AdmissionLimits())
    refused = [(m, p) for m, p in mounted_routes() if door(m, concrete(p)) is Door.NOT_SERVED]
    assert ("POST", "/v1/omni/sleep") in refused and ("POST", "/v1/chat/completions") in refused
    for method, path in refused:
        answer = asyncio.run(knock(app, method, concrete(path)))
        assert answer.get("status", 404) == 404 or answer.get("code") == 1008, (method, path)
    assert inner.reached == []


def test_a_route_no_table_names_is_404():
    inner = Recorder()
    app = SpeechAdmission(inner, AdmissionLimits())
    assert asyncio.run(knock(app, "POST", "/v2/something/new"))["status"] == 404
    assert inner.reached == []


def test_a_cors_preflight_passes_where_a_served_route_is():
    assert door("OPTIONS", "/v1/audio/speech") is Door.FREE
    assert door("OPTIONS", "/v1/audio/voices/alice") is Door.FREE
    assert door("OPTIONS", "/v1/omni/sleep") is None


def test_every_door_has_one_handler():
    from omni_cpu.serve.handlers import HANDLERS

    assert set(HANDLERS) == set(Door)


def test_a_refused_route_names_the_served_ones_from_the_table():
    app = SpeechAdmission(Recorder(), AdmissionLimits())
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "path": "/v1/chat/completions", "method": "POST", "headers": []}
    asyncio.run(app(scope, receive, send))
    message = json.loads(sent[-1]["body"])["error"]["message"]
    engine = [pattern for (_, pattern), found in ROUTES.items() if found in ENGINE_DOORS]
    assert all(pattern in message for pattern in engine), message
