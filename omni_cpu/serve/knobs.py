"""The environment variables `omni-cpu serve` hands to the API server process.

The admission middleware runs inside vLLM-Omni's API server, which builds it with
no arguments (`--middleware` takes an import path), so its limits travel as
environment variables: the knobs omni_cpu.envs declares as read by `serve`, one
per field of `AdmissionLimits` (`max_in_flight` is `OMNI_CPU_SERVE_MAX_IN_FLIGHT`).
Their names, defaults and parsing are the table's; nothing here repeats them.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from omni_cpu import envs

# The import path vLLM's `--middleware` option takes.
MIDDLEWARE_PATH = "omni_cpu.serve.admission.SpeechAdmission"

# The Prometheus gauge the middleware keeps; the supervisor reads it from /metrics to drain.
IN_FLIGHT_METRIC = "omni_cpu_speech_requests_in_flight"
REJECTED_METRIC = "omni_cpu_speech_requests_rejected"
# Of those in flight, how many no stage holds: waiting on their client (it reads slowly, or
# has not sent a WebSocket utterance's next text), or on their reference audio being
# fetched or decoded. The stall watch counts only the rest as engine work.
ON_CLIENT_METRIC = "omni_cpu_speech_requests_waiting_on_client"


def knob(field: str) -> envs.Knob:
    """The knob that carries the `AdmissionLimits` field `field`."""
    return envs.KNOBS[envs.SERVE_PREFIX + field.upper()]


# The fields a user sets, by `serve`'s flag or by the variable (the knobs that declare a
# flag); the plan sets the rest (its drain and down files, the talker's context).
SETTABLE = tuple(
    name.removeprefix(envs.SERVE_PREFIX).lower()
    for name, declared in envs.KNOBS.items()
    if declared.read_by == "serve" and declared.flag
)


def _default(field: str) -> Any:
    return knob(field).value({})


@dataclass(frozen=True)
class AdmissionLimits:
    """What the admission middleware enforces (0 = unlimited); defaults are the knobs'."""

    max_in_flight: int = _default("max_in_flight")
    max_input_chars: int = _default("max_input_chars")
    drain_file: str = _default("drain_file")
    allow_ref_audio_urls: str = _default("allow_ref_audio_urls")
    ref_audio_fetch_s: float = _default("ref_audio_fetch_s")
    accept_frame_limit: bool = _default("accept_frame_limit")
    down_file: str = _default("down_file")
    talker_max_model_len: int = _default("talker_max_model_len")
    tokenizer: str = _default("tokenizer")
    max_body_bytes: int = _default("max_body_bytes")
    ref_audio_dir: str = _default("ref_audio_dir")
    request_timeout_s: float = _default("request_timeout_s")
    body_timeout_s: float = _default("body_timeout_s")
    send_timeout_s: float = _default("send_timeout_s")
    max_long_input_chars: int = _default("max_long_input_chars")

    def to_env(self) -> dict[str, str]:
        """The variables that hand these limits to the API server."""
        return {
            knob(field.name).name: knob(field.name).text(getattr(self, field.name))
            for field in dataclasses.fields(self)
        }

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> AdmissionLimits:
        """The limits `environ` (default: this process's) carries."""
        env = os.environ if environ is None else environ
        return cls(**{field.name: knob(field.name).value(env) for field in dataclasses.fields(cls)})
