"""Every route vLLM-Omni 0.30.0's API server mounts, and which door of admission it takes.

Default deny: a route not named here is refused (404) before vLLM-Omni sees it, so a
new route in a new vLLM-Omni cannot start engine work around admission; the route
test (tests/serve/test_routes.py) builds vLLM-Omni's app and fails on any route this
table does not name, so each one is a decision. Listed from
`vllm_omni.entrypoints.openai.api_server` (its `router`, and vLLM's `build_app` it
starts from) at 0.30.0.
"""

from __future__ import annotations

import re
from enum import Enum


class Door(Enum):
    """How admission treats a route."""

    FREE = "free"  # no engine work: served as is (health and drain still apply)
    SPEECH = "speech"  # one speech request: one place in flight
    BATCH = "batch"  # one place per item
    STREAM = "stream"  # a WebSocket session: one place per utterance
    VOICE_UPLOAD = "voice_upload"  # reference audio stored for later cloning
    NOT_SERVED = "not_served"  # not speech: 404 (chat, images, video, realtime, sleep...)


WEBSOCKET = "WEBSOCKET"  # the "method" of a WebSocket route in this table

# (method, path pattern) -> door. Patterns are Starlette's: {name} is one path segment.
ROUTES: dict[tuple[str, str], Door] = {
    ("GET", "/health"): Door.FREE,
    ("GET", "/metrics"): Door.FREE,
    ("GET", "/v1/models"): Door.FREE,
    ("GET", "/load"): Door.FREE,
    ("GET", "/version"): Door.FREE,
    ("GET", "/ping"): Door.FREE,
    ("POST", "/ping"): Door.FREE,
    ("GET", "/openapi.json"): Door.FREE,
    ("GET", "/docs"): Door.FREE,
    ("GET", "/docs/oauth2-redirect"): Door.FREE,
    ("GET", "/redoc"): Door.FREE,
    ("GET", "/v1/audio/voices"): Door.FREE,
    ("DELETE", "/v1/audio/voices/{name}"): Door.FREE,
    ("POST", "/v1/audio/speech"): Door.SPEECH,
    ("POST", "/v1/audio/speech/batch"): Door.BATCH,
    (WEBSOCKET, "/v1/audio/speech/stream"): Door.STREAM,
    ("POST", "/v1/audio/voices"): Door.VOICE_UPLOAD,
    # Engine work that is not speech from text, or that bypasses the speech checks.
    ("POST", "/v1/audio/generate"): Door.NOT_SERVED,
    ("POST", "/tokenize"): Door.NOT_SERVED,
    ("POST", "/detokenize"): Door.NOT_SERVED,
    ("POST", "/invocations"): Door.NOT_SERVED,
    ("POST", "/v1/chat/completions"): Door.NOT_SERVED,
    ("POST", "/v1/chat/completions/batch"): Door.NOT_SERVED,
    ("POST", "/v1/responses"): Door.NOT_SERVED,
    ("GET", "/v1/responses/{response_id}"): Door.NOT_SERVED,
    ("POST", "/v1/responses/{response_id}/cancel"): Door.NOT_SERVED,
    ("POST", "/v1/completions"): Door.NOT_SERVED,
    ("POST", "/v1/messages"): Door.NOT_SERVED,
    ("POST", "/v1/messages/count_tokens"): Door.NOT_SERVED,
    ("POST", "/generative_scoring"): Door.NOT_SERVED,
    ("POST", "/scale_elastic_ep"): Door.NOT_SERVED,
    ("POST", "/is_scaling_elastic_ep"): Door.NOT_SERVED,
    ("POST", "/start_profile"): Door.NOT_SERVED,
    ("POST", "/stop_profile"): Door.NOT_SERVED,
    ("POST", "/v1/omni/sleep"): Door.NOT_SERVED,
    ("POST", "/v1/omni/wakeup"): Door.NOT_SERVED,
    ("POST", "/v1/images/generations"): Door.NOT_SERVED,
    ("POST", "/v1/images/edits"): Door.NOT_SERVED,
    ("POST", "/v1/videos"): Door.NOT_SERVED,
    ("GET", "/v1/videos"): Door.NOT_SERVED,
    ("POST", "/v1/videos/sync"): Door.NOT_SERVED,
    ("GET", "/v1/videos/{video_id}"): Door.NOT_SERVED,
    ("DELETE", "/v1/videos/{video_id}"): Door.NOT_SERVED,
    ("GET", "/v1/videos/{video_id}/content"): Door.NOT_SERVED,
    ("POST", "/v1/realtime/sessions"): Door.NOT_SERVED,
    ("POST", "/v1/realtime/sessions/{session_id}/step"): Door.NOT_SERVED,
    ("POST", "/v1/realtime/sessions/{session_id}/reset"): Door.NOT_SERVED,
    ("POST", "/v1/realtime/sessions/{session_id}/close"): Door.NOT_SERVED,
    ("GET", "/v1/realtime/sessions/{session_id}/status"): Door.NOT_SERVED,
    (WEBSOCKET, "/v1/video/chat/stream"): Door.NOT_SERVED,
    (WEBSOCKET, "/v1/realtime/video"): Door.NOT_SERVED,
    (WEBSOCKET, "/v1/realtime"): Door.NOT_SERVED,
    (WEBSOCKET, "/v1/duplex"): Door.NOT_SERVED,
    (WEBSOCKET, "/v1/realtime/robot/openpi"): Door.NOT_SERVED,
}

# Doors whose requests start engine work: each passes admission (drain, stage down,
# the in-flight limit, body and input checks).
ENGINE_DOORS = frozenset({Door.SPEECH, Door.BATCH, Door.STREAM, Door.VOICE_UPLOAD})


def _regex(pattern: str) -> re.Pattern[str]:
    """The pattern as a regular expression: each {name} is one path segment."""
    return re.compile("^" + re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(pattern)) + "$")


_MATCHERS = [(method, _regex(pattern), door) for (method, pattern), door in ROUTES.items()]


def door(method: str, path: str) -> Door | None:
    """The door of a request (`method` WEBSOCKET for a WebSocket), None for no known route.

    HEAD is GET's; OPTIONS (a CORS preflight) is free where a served route is. A path
    under /metrics (vLLM mounts Prometheus' app there) is free.
    """
    method = "GET" if method == "HEAD" else method
    if method == "OPTIONS":  # a CORS preflight: vLLM's CORS middleware answers it
        known = {door(other, path) for other in ("GET", "POST", "DELETE")} - {None}
        return Door.FREE if known - {Door.NOT_SERVED} else None
    if method == "GET" and (path == "/metrics" or path.startswith("/metrics/")):
        return Door.FREE
    for known, regex, found in _MATCHERS:
        if known == method and regex.match(path):
            return found
    return None


def served_routes() -> str:
    """The engine routes this server serves, for a refusal: "POST /a, /b, WebSocket /c"."""
    by_method: dict[str, list[str]] = {}
    for (method, pattern), found in ROUTES.items():
        if found in ENGINE_DOORS:
            by_method.setdefault(method, []).append(pattern)
    named = {WEBSOCKET: "WebSocket"}
    return ", ".join(
        f"{named.get(method, method)} {', '.join(patterns)}"
        for method, patterns in by_method.items()
    )
