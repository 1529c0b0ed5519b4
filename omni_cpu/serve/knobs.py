"""The environment variables `omni-cpu serve` hands to the API server process.

The admission middleware runs inside vLLM-Omni's API server, which builds it with
no arguments (`--middleware` takes an import path), so its limits travel as
environment variables. Each is declared, with its default and doc, in omni_cpu.envs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from omni_cpu import envs

MAX_IN_FLIGHT_ENV = "OMNI_CPU_SERVE_MAX_IN_FLIGHT"
MAX_INPUT_CHARS_ENV = "OMNI_CPU_SERVE_MAX_INPUT_CHARS"
DRAIN_FILE_ENV = "OMNI_CPU_SERVE_DRAIN_FILE"
ALLOW_REF_AUDIO_URLS_ENV = "OMNI_CPU_SERVE_ALLOW_REF_AUDIO_URLS"
ACCEPT_FRAME_LIMIT_ENV = "OMNI_CPU_SERVE_ACCEPT_FRAME_LIMIT"

DOWN_FILE_ENV = "OMNI_CPU_SERVE_DOWN_FILE"
MAX_MODEL_LEN_ENV = "OMNI_CPU_SERVE_TALKER_MAX_MODEL_LEN"
TOKENIZER_ENV = "OMNI_CPU_SERVE_TOKENIZER"
MAX_BODY_BYTES_ENV = "OMNI_CPU_SERVE_MAX_BODY_BYTES"
REF_AUDIO_DIR_ENV = "OMNI_CPU_SERVE_REF_AUDIO_DIR"
REQUEST_TIMEOUT_ENV = "OMNI_CPU_SERVE_REQUEST_TIMEOUT_S"


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
    down_file: str = ""
    talker_max_model_len: int = 0
    tokenizer: str = ""
    max_body_bytes: int = 24 << 20
    ref_audio_dir: str = ""
    request_timeout_s: float = 0.0

    def to_env(self) -> dict[str, str]:
        return {
            MAX_IN_FLIGHT_ENV: str(self.max_in_flight),
            MAX_INPUT_CHARS_ENV: str(self.max_input_chars),
            DRAIN_FILE_ENV: self.drain_file,
            ALLOW_REF_AUDIO_URLS_ENV: "1" if self.allow_ref_audio_urls else "0",
            ACCEPT_FRAME_LIMIT_ENV: "1" if self.accept_frame_limit else "0",
            DOWN_FILE_ENV: self.down_file,
            MAX_MODEL_LEN_ENV: str(self.talker_max_model_len),
            TOKENIZER_ENV: self.tokenizer,
            MAX_BODY_BYTES_ENV: str(self.max_body_bytes),
            REF_AUDIO_DIR_ENV: self.ref_audio_dir,
            REQUEST_TIMEOUT_ENV: f"{self.request_timeout_s:g}",
        }

    @classmethod
    def from_env(cls, environ: dict[str, str] | os._Environ[str] | None = None) -> AdmissionLimits:
        env = os.environ if environ is None else environ
        return cls(
            max_in_flight=envs.KNOBS[MAX_IN_FLIGHT_ENV].value(env),
            max_input_chars=envs.KNOBS[MAX_INPUT_CHARS_ENV].value(env),
            drain_file=envs.KNOBS[DRAIN_FILE_ENV].value(env),
            allow_ref_audio_urls=envs.KNOBS[ALLOW_REF_AUDIO_URLS_ENV].value(env),
            accept_frame_limit=envs.KNOBS[ACCEPT_FRAME_LIMIT_ENV].value(env),
            down_file=envs.KNOBS[DOWN_FILE_ENV].value(env),
            talker_max_model_len=envs.KNOBS[MAX_MODEL_LEN_ENV].value(env),
            tokenizer=envs.KNOBS[TOKENIZER_ENV].value(env),
            max_body_bytes=envs.KNOBS[MAX_BODY_BYTES_ENV].value(env),
            ref_audio_dir=envs.KNOBS[REF_AUDIO_DIR_ENV].value(env),
            request_timeout_s=envs.KNOBS[REQUEST_TIMEOUT_ENV].value(env),
        )
