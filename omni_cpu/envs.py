"""Every environment variable omni-cpu reads, declared once: name, default, one-line doc.

Modelled on `vllm/envs.py`: each variable is a module attribute read from the
environment at the moment it is used (`envs.OMNI_CPU_WEIGHTS`), never cached, since
the driver sets some of them for its stage processes and tests change them at run
time. Import-light on purpose (standard library only): `omni-cpu probe` and every
stage process import it. `python -m omni_cpu.envs` prints the table.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any


def _flag(raw: str) -> bool:
    return raw.strip().lower() in ("1", "true", "yes", "on")


def _lower(raw: str) -> str:
    return raw.strip().lower()


def _count(raw: str) -> int:
    """A non-negative integer; anything unreadable counts as 0 (no limit)."""
    try:
        return max(0, int(raw))
    except ValueError:
        return 0


def _rows_by_format(raw: str) -> dict[str, int] | None:
    """`auto` (None), `N` (every format) or `bf16=N,int8=N`; 0 = never. Raises naming the fix."""
    text = raw.strip().lower()
    if text == "auto":
        return None
    try:
        if "=" not in text:
            return {"bf16": int(text), "int8": int(text)}
        pairs = dict(part.split("=", 1) for part in text.split(",") if part.strip())
        return {fmt.strip(): int(rows) for fmt, rows in pairs.items()}
    except ValueError:
        raise ValueError(
            f"OMNI_CPU_AMX_ROWS={raw!r}: expected auto, a row count, or bf16=N,int8=N"
        ) from None


def _seconds(raw: str) -> float:
    """Non-negative seconds; anything unreadable counts as 0 (off)."""
    try:
        value = float(raw)
    except ValueError:
        return 0.0
    return value if value > 0 and value != float("inf") else 0.0


@dataclass(frozen=True)
class Knob:
    """One environment variable: its default (as the text it would be set to) and its doc."""

    name: str
    default: str
    doc: str
    read_by: str  # which process reads it: cli, stage, serve, setup (shell scripts)
    parse: Callable[[str], Any] = str

    def value(self, environ: Mapping[str, str] | None = None) -> Any:
        """The parsed value in `environ` (default: this process's), the default when unset."""
        env = os.environ if environ is None else environ
        raw = env.get(self.name)
        return self.parse(self.default if raw is None or not raw.strip() else raw.strip())


_TABLE: tuple[Knob, ...] = (
    Knob(
        "OMNI_CPU_VERBOSE",
        "0",
        "1 shows the engines' own logs (vLLM INFO, transformers notices, load bars) in run/bench",
        "cli",
        _flag,
    ),
    Knob(
        "OMNI_CPU_WEIGHTS",
        "model",
        "talker weights: model (checkpoint dtype), int8 (W8A8 GEMV, else FBGEMM), int4 (GEMV only)",
        "stage",
        _lower,
    ),
    Knob(
        "OMNI_CPU_CODE_PREDICTOR",
        "fused",
        "code predictor: fused (vLLM's CPU kernels), cached (eager, stock rounding) or stock",
        "stage",
        _lower,
    ),
    Knob(
        "OMNI_CPU_CODE2WAV",
        "stream",
        "code2wav: stream (carried decoder state) or recompute (vLLM-Omni's re-decoding)",
        "stage",
        _lower,
    ),
    Knob(
        "OMNI_CPU_GEMV",
        "auto",
        "GEMV for the linears: auto, avx2 (its AVX2 build even on AVX-512), off/0/false/no",
        "stage",
        _lower,
    ),
    Knob(
        "OMNI_CPU_AMX_ROWS",
        "auto",
        "rows from which a product runs on AMX tiles: auto, N, or bf16=N,int8=N (0: never)",
        "stage",
        _rows_by_format,
    ),
    Knob(
        "OMNI_CPU_KERNEL_CACHE",
        "",
        "where built kernels are cached (default ~/.cache/omni-cpu/kernels)",
        "stage",
    ),
    Knob(
        "VLLM_OMNI_CPU_INDUCTOR",
        "0",
        "1 lets vLLM-Omni torch.compile the code predictor (+12 % speed, +45-90 s start-up)",
        "stage",
        _flag,
    ),
    Knob(
        "OMNI_CPU_STEP_LOG",
        "",
        "a directory: each stage worker appends one JSON line per engine step (bench sets it)",
        "stage",
    ),
    Knob(
        "OMNI_CPU_TORCH_PROFILE",
        "",
        "a directory: each stage worker writes a torch profiler op table of steps 10-19",
        "stage",
    ),
    Knob(
        "OMNI_CPU_STAGE_STALL_S",
        "30",
        "seconds a stage may hold work without using CPU before run/serve call it hung "
        "(exit 4; /health 503 naming it). 0 = never",
        "cli",
        _seconds,
    ),
    Knob(
        "OMNI_CPU_SERVE_REQUEST_TIMEOUT_S",
        "0",
        "serve --request-timeout: seconds a speech request may take (a request's `timeout` "
        "field may ask for less); past it: 504, or the stream ends. 0 = none",
        "serve",
        _seconds,
    ),
    Knob(
        "OMNI_CPU_SERVE_MAX_IN_FLIGHT",
        "0",
        "speech requests admitted at once (running + waiting); past it: 429. 0 = no limit",
        "serve",
        _count,
    ),
    Knob(
        "OMNI_CPU_SERVE_MAX_INPUT_CHARS",
        "0",
        "longest `input` text in characters; longer: 400. 0 = no limit",
        "serve",
        _count,
    ),
    Knob(
        "OMNI_CPU_SERVE_MAX_BODY_BYTES",
        str(24 << 20),
        "largest request body in bytes (30 s of 48 kHz stereo float WAV as base64 fits); "
        "larger: 413. 0 = no limit",
        "serve",
        _count,
    ),
    Knob(
        "OMNI_CPU_SERVE_REF_AUDIO_DIR",
        "",
        "the folder file:// `ref_audio` may name (serve --ref-audio-dir); checked like base64",
        "serve",
    ),
    Knob(
        "OMNI_CPU_SERVE_DRAIN_FILE",
        "",
        "while this file exists the server is draining: new speech requests and /health get 503",
        "serve",
    ),
    Knob(
        "OMNI_CPU_SERVE_ALLOW_REF_AUDIO_URLS",
        "0",
        "1: the server may fetch an http(s) `ref_audio` URL; 0: such requests get 400",
        "serve",
        _flag,
    ),
    Knob(
        "OMNI_CPU_SERVE_ACCEPT_FRAME_LIMIT",
        "0",
        "1: a Base request that reaches its frame budget returns its audio; 0: vLLM-Omni's 500",
        "serve",
        _flag,
    ),
    Knob(
        "OMNI_CPU_SERVE_DOWN_FILE",
        "",
        "while this file exists a stage is down: /health and speech requests get 503 naming it",
        "serve",
    ),
    Knob(
        "OMNI_CPU_SERVE_TALKER_MAX_MODEL_LEN",
        "0",
        "the talker's context; prompts that need more positions get 400. 0 = not checked",
        "serve",
        _count,
    ),
    Knob(
        "OMNI_CPU_SERVE_TOKENIZER",
        "",
        "checkpoint whose tokenizer measures prompts for the context check",
        "serve",
    ),
    Knob(
        "OMNI_CPU_OWNER",
        "",
        "set by omni-cpu, not by hand: the run's token its watchdog finds stage processes by",
        "stage",
    ),
    Knob(
        "OMNI_CPU_DRIVER",
        "",
        "set by omni-cpu, not by hand: `PID EPOCH TOKEN` of a driver that re-executed itself "
        "with its stages' preloads; the stages forked from it carry it",
        "cli",
    ),
    Knob(
        "OMNI_CPU_STAGE_START",
        "fork",
        "how stage engine cores start: fork (from the driver, which has imported torch and "
        "vLLM; needs Intel OpenMP preloaded, else spawn) or spawn (a fresh interpreter each)",
        "cli",
        _lower,
    ),
    Knob(
        "VLLM_TARGET_DEVICE",
        "",
        "vLLM's own device choice; cpu activates omni-cpu's platform (run and serve set it)",
        "stage",
        _lower,
    ),
    Knob(
        "OMNI_CPU_TORCH_INDEX",
        "",
        "install-runtime.sh: a PyTorch CPU package index (or mirror) to take torch +cpu from",
        "setup",
    ),
    Knob(
        "OMNI_CPU_PROBE_ONLY",
        "0",
        "setup.sh: 1 installs only the light probe/plan/validate part (no torch, no vLLM)",
        "setup",
        _flag,
    ),
)

KNOBS: dict[str, Knob] = {knob.name: knob for knob in _TABLE}

# The talker stage's weight format (omni_cpu.models.int8). "model" keeps the
# checkpoint's dtype; "int8" and "int4" quantize the talker's and code predictor's
# linears (int4: groups of 32 K elements, omni-cpu's GEMV only; omni_cpu.kernels.gemv).
WEIGHTS_ENV = "OMNI_CPU_WEIGHTS"
WEIGHT_CHOICES = ("model", "int8", "int4")

if TYPE_CHECKING:
    OMNI_CPU_VERBOSE: bool
    OMNI_CPU_WEIGHTS: str
    OMNI_CPU_CODE_PREDICTOR: str
    OMNI_CPU_CODE2WAV: str
    OMNI_CPU_GEMV: str
    OMNI_CPU_AMX_ROWS: dict[str, int] | None
    OMNI_CPU_KERNEL_CACHE: str
    VLLM_OMNI_CPU_INDUCTOR: bool
    OMNI_CPU_STEP_LOG: str
    OMNI_CPU_TORCH_PROFILE: str
    OMNI_CPU_STAGE_STALL_S: float
    OMNI_CPU_SERVE_REQUEST_TIMEOUT_S: float
    OMNI_CPU_SERVE_MAX_IN_FLIGHT: int
    OMNI_CPU_SERVE_MAX_INPUT_CHARS: int
    OMNI_CPU_SERVE_MAX_BODY_BYTES: int
    OMNI_CPU_SERVE_REF_AUDIO_DIR: str
    OMNI_CPU_SERVE_DRAIN_FILE: str
    OMNI_CPU_SERVE_ALLOW_REF_AUDIO_URLS: bool
    OMNI_CPU_SERVE_ACCEPT_FRAME_LIMIT: bool
    OMNI_CPU_SERVE_DOWN_FILE: str
    OMNI_CPU_SERVE_TALKER_MAX_MODEL_LEN: int
    OMNI_CPU_SERVE_TOKENIZER: str
    OMNI_CPU_OWNER: str
    OMNI_CPU_DRIVER: str
    OMNI_CPU_STAGE_START: str
    VLLM_TARGET_DEVICE: str
    OMNI_CPU_TORCH_INDEX: str
    OMNI_CPU_PROBE_ONLY: bool


def __getattr__(name: str) -> Any:
    # Module attributes are read at use, like vllm.envs: `envs.OMNI_CPU_WEIGHTS`.
    if name in KNOBS:
        return KNOBS[name].value()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*KNOBS, "KNOBS", "Knob"])


def main() -> None:
    """Print the table: name, default, who reads it, what it does, and the value set here."""
    for knob in _TABLE:
        now = os.environ.get(knob.name)
        shown = f" (set: {now})" if now is not None else ""
        sys.stdout.write(f"{knob.name}={knob.default!s:<8} [{knob.read_by}] {knob.doc}{shown}\n")


if __name__ == "__main__":
    main()
