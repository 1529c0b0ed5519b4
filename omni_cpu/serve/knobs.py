"""Every environment variable `omni-cpu serve` hands to the API server process, in one table.

The admission middleware runs inside vLLM-Omni's API server, which builds it with
no arguments (`--middleware` takes an import path), so its limits travel as
environment variables. Each knob: name, default, what it does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

MAX_IN_FLIGHT_ENV = "OMNI_CPU_SERVE_MAX_IN_FLIGHT"
MAX_INPUT_CHARS_ENV = "OMNI_CPU_SERVE_MAX_INPUT_CHARS"
DRAIN_FILE_ENV = "OMNI_CPU_SERVE_DRAIN_FILE"
ALLOW_REF_AUDIO_URLS_ENV = "OMNI_CPU_SERVE_ALLOW_REF_AUDIO_URLS"
ACCEPT_FRAME_LIMIT_ENV = "OMNI_CPU_SERVE_ACCEPT_FRAME_LIMIT"

KNOBS: dict[str, tuple[str, str]] = {
    MAX_IN_FLIGHT_ENV: (
        "0",
        "speech requests admitted at once (running + waiting); past it: 429. 0 = no limit",
    ),
    MAX_INPUT_CHARS_ENV: ("0", "longest `input` text in characters; longer: 400. 0 = no limit"),
    DRAIN_FILE_ENV: (
        "",
        "while this file exists the server is draining: new speech requests and /health get 503",
    ),
    ALLOW_REF_AUDIO_URLS_ENV: (
        "0",
        "1: the server may fetch an http(s) `ref_audio` URL; 0: such requests get 400",
    ),
    ACCEPT_FRAME_LIMIT_ENV: (
        "0",
        "1: a Base request that reaches its frame budget returns its audio; 0: vLLM-Omni's 500",
    ),
}

# The import path vLLM's `--middleware` option takes.
MIDDLEWARE_PATH = "omni_cpu.serve.admission.SpeechAdmission"

# The Prometheus gauge the middleware keeps; the supervisor reads it from /metrics to drain.
IN_FLIGHT_METRIC = "omni_cpu_speech_requests_in_flight"
REJECTED_METRIC = "omni_cpu_speech_requests_rejected"


@dataclass(frozen=True)
class AdmissionLimits:
    """What the admission middleware enforces (0 = unlimited)."""

    max_in_flight: int = 0
    max_input_chars: int = 0
    drain_file: str = ""
    allow_ref_audio_urls: bool = False
    accept_frame_limit: bool = False

    def to_env(self) -> dict[str, str]:
        return {
            MAX_IN_FLIGHT_ENV: str(self.max_in_flight),
            MAX_INPUT_CHARS_ENV: str(self.max_input_chars),
            DRAIN_FILE_ENV: self.drain_file,
            ALLOW_REF_AUDIO_URLS_ENV: "1" if self.allow_ref_audio_urls else "0",
            ACCEPT_FRAME_LIMIT_ENV: "1" if self.accept_frame_limit else "0",
        }

    @classmethod
    def from_env(cls, environ: dict[str, str] | os._Environ[str] | None = None) -> AdmissionLimits:
        env = os.environ if environ is None else environ

        def number(name: str) -> int:
            try:
                return max(0, int(env.get(name, KNOBS[name][0]) or 0))
            except ValueError:
                return 0

        return cls(
            max_in_flight=number(MAX_IN_FLIGHT_ENV),
            max_input_chars=number(MAX_INPUT_CHARS_ENV),
            drain_file=env.get(DRAIN_FILE_ENV, ""),
            allow_ref_audio_urls=env.get(ALLOW_REF_AUDIO_URLS_ENV, "0").strip() == "1",
            accept_frame_limit=env.get(ACCEPT_FRAME_LIMIT_ENV, "0").strip() == "1",
        )
