"""Close a connection that sends no request: uvicorn (0.55) waits for one for ever.

uvicorn times out a kept-alive connection between requests, but not a new one that
sends nothing, or headers that never end: each holds a socket and a file descriptor
for as long as the client likes (hundreds are a denial of service). Installed in
vLLM-Omni's API server process by the admission middleware: a connection whose first
request's headers are not complete `timeout_s` after it opened is closed.
"""

from __future__ import annotations

import asyncio
from typing import Any

_INSTALLED: dict[str, float] = {}


def _close_if_no_request(protocol: Any) -> None:
    transport = getattr(protocol, "transport", None)
    if transport is None or transport.is_closing():
        return
    if transport.get_protocol() is not protocol:
        return  # upgraded to a WebSocket, which has timeouts of its own
    if getattr(protocol, "cycle", None) is None:
        transport.close()


def _patch(cls: Any, timeout_s: float) -> None:
    original = cls.connection_made

    def connection_made(self: Any, transport: Any) -> None:
        original(self, transport)
        asyncio.get_running_loop().call_later(timeout_s, _close_if_no_request, self)

    cls.connection_made = connection_made


def install(timeout_s: float) -> None:
    """From now on, close connections that send no whole request head within `timeout_s`."""
    if timeout_s <= 0 or "timeout_s" in _INSTALLED:
        return
    _INSTALLED["timeout_s"] = timeout_s
    from uvicorn.protocols.http.h11_impl import H11Protocol

    _patch(H11Protocol, timeout_s)
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # httptools is optional in uvicorn
        return
    _patch(HttpToolsProtocol, timeout_s)
