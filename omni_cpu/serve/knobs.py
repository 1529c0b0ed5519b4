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
DOWN_FILE_ENV = "OMNI_CPU_SERVE_DOWN_FILE"
MAX_MODEL_LEN_ENV = "OMNI_CPU_SERVE_TALKER_MAX_MODEL_LEN"
TOKENIZER_ENV = "OMNI_CPU_SERVE_TOKENIZER"

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
    DOWN_FILE_ENV: (
        "",
        "while this file exists a stage is down: /health and speech requests get 503 naming it",
    ),
    MAX_MODEL_LEN_ENV: (
        "0",
        "the talker's context; prompts that need more positions get 400. 0 = not checked",
    ),
    TOKENIZER_ENV: ("", "checkpoint whose tokenizer measures prompts for the context check"),
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
    down_file: str = ""
    talker_max_model_len: int = 0
    tokenizer: str = ""

    def to_env(self) -> dict[str, str]:
        return {
            MAX_IN_FLIGHT_ENV: str(self.max_in_flight),
            MAX_INPUT_CHARS_ENV: str(self.max_input_chars),
            DRAIN_FILE_ENV: self.drain_file,
            DOWN_FILE_ENV: self.down_file,
            MAX_MODEL_LEN_ENV: str(self.talker_max_model_len),
            TOKENIZER_ENV: self.tokenizer,
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
            down_file=env.get(DOWN_FILE_ENV, ""),
            talker_max_model_len=number(MAX_MODEL_LEN_ENV),
            tokenizer=env.get(TOKENIZER_ENV, ""),
        )
