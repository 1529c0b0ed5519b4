"""Every environment variable omni-cpu reads, declared once: name, default, one-line doc.

Modelled on `vllm/envs.py`: each variable is a module attribute read from the
environment at the moment it is used (`envs.OMNI_CPU_WEIGHTS`), never cached, since
the driver sets some of them for its stage processes and tests change them at run
time. Import-light on purpose (the standard library, omni_cpu.errors and the weight-format
table omni_cpu.weight_formats only): `omni-cpu probe` and every stage process import it.
`python -m omni_cpu.envs` prints the knobs a user sets (`--all`: every knob; `--markdown`:
docs/configuration.md's table).
Each knob says who sets it (`audience`): a user, the profile for a stage, or omni-cpu itself.

This is the only module that names a variable: other code takes a name from its knob
(`envs.OWNER.name`) and reads a value through it (`envs.OMNI_CPU_WEIGHTS`), and
tests/test_envs.py fails on an `OMNI_CPU_*` literal anywhere else in the package.
A value a knob does not take is refused here, once, in one wording (SettingError).
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from omni_cpu import weight_formats
from omni_cpu.errors import SettingError


def _takes(form: str) -> Callable[[Callable[[str], Any]], Callable[[str], Any]]:
    """Give a refusing parser the words for what it takes (a Knob's `allowed` reads them)."""

    def mark(parse: Callable[[str], Any]) -> Callable[[str], Any]:
        parse.form = form  # type: ignore[attr-defined]
        return parse

    return mark


_YES = ("1", "true", "yes", "on")
_NO = ("0", "false", "no", "off")


@_takes("1 or 0 (true/false, yes/no, on/off)")
def _flag(raw: str) -> bool:
    """On or off in the usual words; ValueError for anything else (a typo is not "off")."""
    text = raw.strip().lower()
    if text not in _YES + _NO:
        raise ValueError(raw)
    return text in _YES


# A host name as URLs carry it (letters, digits, hyphens; dot-separated labels).
HOST_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$")


def _host_list(raw: str) -> str:
    """Comma-separated host names, addresses, CIDRs or `*`, normalised; ValueError otherwise."""
    entries = [entry.strip().lower() for entry in raw.split(",") if entry.strip()]
    for entry in entries:
        if entry == "*" or HOST_NAME.match(entry):
            continue
        ipaddress.ip_network(entry, strict=False)  # ValueError: not an address or CIDR
    return ",".join(entries)


def _lower(raw: str) -> str:
    return raw.strip().lower()


def _switch(raw: str) -> str:
    """Lower case, with the usual words for "off" read as `off`."""
    text = raw.strip().lower()
    return "off" if text in ("0", "false", "no") else text


def _path_or_off(raw: str) -> str:
    """A path as given, or `off` for the usual words for it."""
    return "off" if _switch(raw) == "off" else raw.strip()


@_takes("a whole number, 0 or more (0: no limit)")
def _count(raw: str) -> int:
    """A non-negative integer; ValueError for anything else (`12k`, `-1`, `abc`)."""
    value = int(raw.strip())
    if value < 0:
        raise ValueError(raw)
    return value


def _rows_by_format(raw: str) -> dict[str, int] | None:
    """`auto` (None), `N` (every format) or `bf16=N,int8=N`; 0 = never. ValueError otherwise."""
    text = raw.strip().lower()
    if text == "auto":
        return None
    if "=" not in text:
        rows = {"bf16": _count(text), "int8": _count(text)}
    else:
        pairs = dict(part.split("=", 1) for part in text.split(",") if part.strip())
        rows = {fmt.strip(): _count(count) for fmt, count in pairs.items()}
    if not set(rows) <= {"bf16", "int8"}:
        raise ValueError(raw)
    return rows


@_takes("seconds as a plain number, 0 or more (0: off), without a unit")
def _seconds(raw: str) -> float:
    """Non-negative finite seconds; ValueError for anything else (`30s`, `-1`, `inf`, `nan`)."""
    value = float(raw.strip())
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(raw)
    return value


@dataclass(frozen=True)
class Knob:
    """One environment variable: its default (as the text it would be set to) and its doc.

    `choices` (after `parse`) or `form` (what `parse` accepts, where it can refuse) say
    which values it takes; `read` refuses any other, in one wording, wherever the value
    comes from: this process's environment, a stage's, or the command-line option that
    sets the same thing (`--weights`).
    """

    name: str
    default: str
    doc: str
    read_by: str  # which process reads it: cli, stage, serve, setup (shell scripts)
    parse: Callable[[str], Any] = str
    choices: tuple[str, ...] = ()
    form: str = ""  # the values a refusing `parse` takes, in words
    audience: str = ""  # who sets it: one of AUDIENCES
    # The command-line option that sets the same thing (`serve --max-in-flight`): its
    # help is `doc`, and a value given by it is read by `read`, refused in the same words.
    flag: str = ""

    @property
    def allowed(self) -> str:
        """The values it takes, in words ("" when it takes any)."""
        if self.choices:
            return f"one of: {', '.join(self.choices)}"
        return self.form or getattr(self.parse, "form", "")

    def read(self, raw: str, given_as: str | None = None) -> Any:
        """`raw` parsed; SettingError naming `given_as` (default: the variable) when refused."""
        try:
            value = self.parse(raw.strip())
        except ValueError:
            raise self.refusal(raw, given_as) from None
        if self.choices and value not in self.choices:
            raise self.refusal(raw, given_as)
        return value

    def refusal(self, raw: str, given_as: str | None = None) -> SettingError:
        """The one line for a value this knob does not take."""
        setting = f"{given_as} {raw.strip()!r}" if given_as else f"{self.name}={raw.strip()!r}"
        return SettingError(f"{setting} is not allowed", f"use {self.allowed}")

    def value(self, environ: Mapping[str, str] | None = None) -> Any:
        """The parsed value in `environ` (default: this process's), the default when unset."""
        env = os.environ if environ is None else environ
        raw = env.get(self.name)
        return self.read(self.default if raw is None or not raw.strip() else raw)

    def text(self, value: Any) -> str:
        """The text that sets this knob to `value` (the inverse of `parse`)."""
        if isinstance(value, bool):
            return "1" if value else "0"
        if isinstance(value, float):
            return f"{value:g}"
        return str(value)


KNOBS: dict[str, Knob] = {}


# Who sets a knob. docs/configuration.md lists the user's; the profile writes the stage's
# into each stage's environment; omni-cpu and its tests set the rest. The set-up scripts'
# knobs are a user's: the README tells them to set them on `make setup`'s command line.
AUDIENCES = {
    "user": "set by hand, to change what omni-cpu does",
    "stage": "set per stage by the profile (or the command that plans it), not by hand",
    "internal": "plumbing between omni-cpu's own processes, or debugging",
}


def _declare(knob: Knob) -> Knob:
    if knob.audience not in AUDIENCES:
        raise ValueError(f"{knob.name}: audience {knob.audience!r} is not one of {set(AUDIENCES)}")
    KNOBS[knob.name] = knob
    return knob


# Each knob is also a constant here, for code that needs its name (to set it in a
# child's environment, to name it in a message) or its choices: `envs.WEIGHTS.name`.
VERBOSE = _declare(
    Knob(
        "OMNI_CPU_VERBOSE",
        "0",
        "1 shows the engines' own logs (vLLM INFO, transformers notices, load bars) in run/bench",
        "cli",
        _flag,
        audience="user",
    )
)
# The next five are a stage's choices: the profile's stage entry says each
# (`additional_config: {omni_cpu: {weights: ...}}`, omni_cpu.profile.choices) and the
# variable, where set, overrides it for experiments; read them through
# `choices.value(knob)`, never as `envs.OMNI_CPU_*`.
# The talker stage's weight format (omni_cpu.weight_formats names each and its kernels).
WEIGHTS = _declare(
    Knob(
        "OMNI_CPU_WEIGHTS",
        "model",
        weight_formats.knob_doc(),
        "stage",
        _lower,
        choices=weight_formats.NAMES,
        audience="stage",
    )
)
# fused: the product's forward (its fallbacks, vLLM's CPU ops and the eager cached
# forward, are its own, not choices). stock stays: vLLM-Omni's own forward is the
# reference the agreement tests hold fused to, and the way back if fused misbehaves.
CODE_PREDICTOR = _declare(
    Knob(
        "OMNI_CPU_CODE_PREDICTOR",
        "fused",
        "code predictor: fused (KV-cached: one C++ call, else vLLM's CPU ops) or stock "
        "(vLLM-Omni's re-prefill: the reference)",
        "stage",
        _lower,
        choices=("fused", "stock"),
        audience="stage",
    )
)
# stream: the product's decode. recompute stays: it is vLLM-Omni's own decode, untouched
# (tests/models/test_code2wav.py checks it stays so), the way back where the streaming
# decode misbehaves on a codec it was not written for.
CODE2WAV = _declare(
    Knob(
        "OMNI_CPU_CODE2WAV",
        "stream",
        "code2wav: stream (carried decoder state) or recompute (vLLM-Omni's re-decoding)",
        "stage",
        _lower,
        choices=("stream", "recompute"),
        audience="stage",
    )
)
GEMV = _declare(
    Knob(
        "OMNI_CPU_GEMV",
        "auto",
        "GEMV for the linears: auto, avx2 (its AVX2 build even on AVX-512), off (0/false/no too)",
        "stage",
        _switch,
        choices=("auto", "avx2", "off"),
        audience="stage",
    )
)
AMX_ROWS = _declare(
    Knob(
        "OMNI_CPU_AMX_ROWS",
        "auto",
        "rows from which a product runs on AMX tiles: auto, N, or bf16=N,int8=N (0: never)",
        "stage",
        _rows_by_format,
        form="auto, a row count, or bf16=N,int8=N",
        audience="stage",
    )
)
KERNEL_CACHE = _declare(
    Knob(
        "OMNI_CPU_KERNEL_CACHE",
        "",
        "where kernels compiled on first use are cached, where no prebuilt one matches"
        " (default ~/.cache/omni-cpu/kernels)",
        "stage",
        audience="user",
    )
)
WEIGHT_CACHE = _declare(
    Knob(
        "OMNI_CPU_WEIGHT_CACHE",
        "",
        "where packed/quantized talker weights are cached (default: packed/ in the kernel "
        "cache); off: pack at every start",
        "stage",
        _path_or_off,
        audience="user",
    )
)
INDUCTOR = _declare(
    Knob(
        "VLLM_OMNI_CPU_INDUCTOR",
        "0",
        "1 lets vLLM-Omni torch.compile the code predictor (slightly faster steps, a much "
        "longer start-up)",
        "stage",
        _flag,
        audience="user",
    )
)
# A spanning replica's talker (omni_cpu.plan.placement): no one node holds it, so its
# memory interleaves over every CPU_VISIBLE_MEMORY_NODES node, where vLLM binds a
# worker's memory to its first CPU's node alone.
INTERLEAVE_MEMORY = _declare(
    Knob(
        "OMNI_CPU_INTERLEAVE_MEMORY",
        "0",
        "1 interleaves the stage's memory over all its CPU_VISIBLE_MEMORY_NODES (the profile "
        "sets it for a spanning replica's talker)",
        "stage",
        _flag,
        audience="stage",
    )
)
STEP_LOG = _declare(
    Knob(
        "OMNI_CPU_STEP_LOG",
        "",
        "a directory: each stage worker appends one JSON line per engine step (bench sets it)",
        "stage",
        audience="internal",
    )
)
STARTUP_DIR = _declare(
    Knob(
        "OMNI_CPU_STARTUP_DIR",
        "",
        "set by omni-cpu, not by hand: a directory where each stage worker writes its "
        "start-up phases (run/bench --json `startup.stages`)",
        "stage",
        audience="internal",
    )
)
TORCH_PROFILE = _declare(
    Knob(
        "OMNI_CPU_TORCH_PROFILE",
        "",
        "a directory: each stage worker writes a torch profiler op table of steps 10-19",
        "stage",
        audience="internal",
    )
)
STAGE_STALL_S = _declare(
    Knob(
        "OMNI_CPU_STAGE_STALL_S",
        "30",
        "seconds a stage may hold work without progress (engine steps that did work) before "
        "run/serve call it hung (exit 4; /health 503 naming it). 0 = never",
        "cli",
        _seconds,
        audience="user",
    )
)
SERVE_REQUEST_TIMEOUT_S = _declare(
    Knob(
        "OMNI_CPU_SERVE_REQUEST_TIMEOUT_S",
        "0",
        "seconds a speech request may take (504, or its stream ends); a request's `timeout` "
        "field may ask for less. 0 = none",
        "serve",
        _seconds,
        flag="--request-timeout",
        audience="internal",
    )
)
SERVE_MAX_IN_FLIGHT = _declare(
    Knob(
        "OMNI_CPU_SERVE_MAX_IN_FLIGHT",
        "0",
        "speech requests admitted at once (running + waiting); more get 429. serve's default: the "
        "streams the profile predicts its replica carries without a gap (where it predicts none, "
        "max_num_seqs + --max-waiting)",
        "serve",
        _count,
        flag="--max-in-flight",
        audience="internal",
    )
)
SERVE_MAX_INPUT_CHARS = _declare(
    Knob(
        "OMNI_CPU_SERVE_MAX_INPUT_CHARS",
        "0",
        "longest `input` text in characters; longer: 400. serve's default: half the talker's "
        "max_model_len. 0 = no limit",
        "serve",
        _count,
        flag="--max-input-chars",
        audience="internal",
    )
)
SERVE_MAX_LONG_INPUT_CHARS = _declare(
    Knob(
        "OMNI_CPU_SERVE_MAX_LONG_INPUT_CHARS",
        "0",
        "longest `input` a non-streamed speech request may send, spoken in sentences of at most "
        "the input limit each (one answer); longer: 400. serve's default: 4 times the input "
        "limit. 0 = no split",
        "serve",
        _count,
        flag="--max-long-input-chars",
        audience="internal",
    )
)
SERVE_MAX_BODY_BYTES = _declare(
    Knob(
        "OMNI_CPU_SERVE_MAX_BODY_BYTES",
        str(24 << 20),
        "largest request body in bytes (30 s of 48 kHz stereo float WAV as base64 fits); "
        "larger: 413. Default 24 MiB; 0 = no limit",
        "serve",
        _count,
        flag="--max-body-bytes",
        audience="internal",
    )
)
SERVE_REF_AUDIO_DIR = _declare(
    Knob(
        "OMNI_CPU_SERVE_REF_AUDIO_DIR",
        "",
        "the folder whose files requests may name as file:// `ref_audio` (checked like base64)",
        "serve",
        flag="--ref-audio-dir",
        audience="internal",
    )
)
SERVE_DRAIN_FILE = _declare(
    Knob(
        "OMNI_CPU_SERVE_DRAIN_FILE",
        "",
        "while this file exists the server is draining: new speech requests and /health get 503",
        "serve",
        audience="internal",
    )
)
SERVE_ALLOW_REF_AUDIO_URLS = _declare(
    Knob(
        "OMNI_CPU_SERVE_ALLOW_REF_AUDIO_URLS",
        "",
        "host names, addresses or CIDRs (comma-separated; `*` = any public host) whose http(s) "
        "reference audio the server fetches; loopback, link-local and private addresses only "
        "when listed; other URLs get 400",
        "serve",
        _host_list,
        form="host names, addresses or CIDRs, comma-separated, or *",
        flag="--allow-ref-audio-urls",
        audience="internal",
    )
)
SERVE_REF_AUDIO_FETCH_S = _declare(
    Knob(
        "OMNI_CPU_SERVE_REF_AUDIO_FETCH_S",
        "10",
        "seconds the server gives an allowed reference audio URL's host to accept the "
        "connection, and again to send the audio; past either: 504 naming the host. "
        "Default 10; 0 = none",
        "serve",
        _seconds,
        flag="--ref-audio-fetch-timeout",
        audience="internal",
    )
)
SERVE_ACCEPT_FRAME_LIMIT = _declare(
    Knob(
        "OMNI_CPU_SERVE_ACCEPT_FRAME_LIMIT",
        "0",
        "1: a Base request that reaches its frame budget returns its audio instead of "
        "vLLM-Omni's 500 (random-weight checkpoints never emit end-of-speech)",
        "serve",
        _flag,
        flag="--accept-frame-limit",
        audience="internal",
    )
)
SERVE_DOWN_FILE = _declare(
    Knob(
        "OMNI_CPU_SERVE_DOWN_FILE",
        "",
        "while this file exists a stage is down: /health and speech requests get 503 naming it",
        "serve",
        audience="internal",
    )
)
SERVE_TALKER_MAX_MODEL_LEN = _declare(
    Knob(
        "OMNI_CPU_SERVE_TALKER_MAX_MODEL_LEN",
        "0",
        "the talker's context; prompts that need more positions get 400. 0 = not checked",
        "serve",
        _count,
        audience="internal",
    )
)
SERVE_TOKENIZER = _declare(
    Knob(
        "OMNI_CPU_SERVE_TOKENIZER",
        "",
        "checkpoint whose tokenizer measures prompts for the context check",
        "serve",
        audience="internal",
    )
)
SERVE_BODY_TIMEOUT_S = _declare(
    Knob(
        "OMNI_CPU_SERVE_BODY_TIMEOUT_S",
        "30",
        "seconds a client has to send a request's headers (else the connection is closed) "
        "and then its body (else 408); the request holds no place while it sends. Default 30; "
        "0 = none",
        "serve",
        _seconds,
        flag="--body-timeout",
        audience="internal",
    )
)
SERVE_SEND_TIMEOUT_S = _declare(
    Knob(
        "OMNI_CPU_SERVE_SEND_TIMEOUT_S",
        "30",
        "seconds a client may leave a reply's data untaken; past it the stream is cut and its "
        "place returned (while draining too). Default 30; 0 = none",
        "serve",
        _seconds,
        flag="--send-timeout",
        audience="internal",
    )
)
STAGE_PROGRESS_DIR = _declare(
    Knob(
        "OMNI_CPU_STAGE_PROGRESS_DIR",
        "",
        "set by omni-cpu, not by hand: the folder each stage counts its work steps in, "
        "which the stall watch reads (progress is steps, not CPU time)",
        "stage",
        audience="internal",
    )
)
OWNER = _declare(
    Knob(
        "OMNI_CPU_OWNER",
        "",
        "set by omni-cpu, not by hand: the run's token its watchdog finds stage processes by",
        "stage",
        audience="internal",
    )
)
STAGE_DEVICE = _declare(
    Knob(
        "OMNI_CPU_STAGE_DEVICE",
        "",
        "set by vLLM-Omni per stage, not by hand: the platform's device variable, a label "
        "(CPU_VISIBLE_MEMORY_NODES binds the memory)",
        "stage",
        audience="internal",
    )
)
ENGINES_BARRED = _declare(
    Knob(
        "OMNI_CPU_ENGINES_BARRED",
        "",
        "set by the tests, not by hand: a file; while it exists a stage engine that starts "
        "writes its pid there and fails (engines start only in tests marked e2e)",
        "stage",
        audience="internal",
    )
)
DRIVER = _declare(
    Knob(
        "OMNI_CPU_DRIVER",
        "",
        "set by omni-cpu, not by hand: `PID EPOCH TOKEN` of a driver that re-executed itself "
        "with its stages' preloads; the stages forked from it carry it",
        "cli",
        audience="internal",
    )
)
STAGE_START = _declare(
    Knob(
        "OMNI_CPU_STAGE_START",
        "fork",
        "how stage engine cores start: fork (from the driver, which has imported torch and "
        "vLLM; needs Intel OpenMP preloaded, else spawn) or spawn (a fresh interpreter each)",
        "cli",
        _lower,
        choices=("fork", "spawn"),
        audience="user",
    )
)
TARGET_DEVICE = _declare(
    Knob(
        "VLLM_TARGET_DEVICE",
        "",
        "vLLM's own device choice; cpu activates omni-cpu's platform (run and serve set it)",
        "stage",
        _lower,
        audience="user",
    )
)
TORCH_INDEX = _declare(
    Knob(
        "OMNI_CPU_TORCH_INDEX",
        "",
        "install-runtime.sh: a PyTorch CPU package index (or mirror) to take torch +cpu from",
        "setup",
        audience="user",
    )
)
PROBE_ONLY = _declare(
    Knob(
        "OMNI_CPU_PROBE_ONLY",
        "0",
        "setup.sh: 1 installs only the light probe/plan/validate part (no torch, no vLLM)",
        "setup",
        _flag,
        audience="user",
    )
)

# Every knob the API server reads (read_by "serve") is this prefix and the name of the
# omni_cpu.serve.knobs.AdmissionLimits field it carries, upper-cased.
SERVE_PREFIX = "OMNI_CPU_SERVE_"

# Who reads each knob, for docs/configuration.md's table.
READERS = {
    "cli": "omni-cpu's commands",
    "stage": "each stage process",
    "serve": "the API server",
    "setup": "the set-up scripts",
}


def check(environ: Mapping[str, str]) -> None:
    """Refuse (SettingError) the first knob `environ` sets to a value it does not take.

    The driver asks this of the environment its stages will get before starting any,
    so a bad value is one line at once, not a stage's traceback a minute later.
    """
    for knob in KNOBS.values():
        knob.value(environ)


def markdown_table(audiences: tuple[str, ...] = ("user",)) -> list[str]:
    """The table of the knobs for `audiences` (docs/configuration.md's: `make profiles`)."""
    rows = ["| variable | default | read by | what it does |", "|---|---|---|---|"]
    for knob in KNOBS.values():
        if knob.audience not in audiences:
            continue
        default = f"`{knob.default}`" if knob.default else "—"
        doc = knob.doc.replace("|", "\\|")
        rows.append(f"| `{knob.name}` | {default} | {READERS[knob.read_by]} | {doc} |")
    return rows


# serve's knobs are typed once, as omni_cpu.serve.knobs.AdmissionLimits' fields.
if TYPE_CHECKING:
    OMNI_CPU_VERBOSE: bool
    OMNI_CPU_WEIGHTS: str
    OMNI_CPU_CODE_PREDICTOR: str
    OMNI_CPU_CODE2WAV: str
    OMNI_CPU_GEMV: str
    OMNI_CPU_AMX_ROWS: dict[str, int] | None
    OMNI_CPU_KERNEL_CACHE: str
    OMNI_CPU_WEIGHT_CACHE: str
    VLLM_OMNI_CPU_INDUCTOR: bool
    OMNI_CPU_INTERLEAVE_MEMORY: bool
    OMNI_CPU_STEP_LOG: str
    OMNI_CPU_STARTUP_DIR: str
    OMNI_CPU_TORCH_PROFILE: str
    OMNI_CPU_ENGINES_BARRED: str
    OMNI_CPU_STAGE_STALL_S: float
    OMNI_CPU_STAGE_PROGRESS_DIR: str
    OMNI_CPU_OWNER: str
    OMNI_CPU_DRIVER: str
    OMNI_CPU_STAGE_START: str
    OMNI_CPU_STAGE_DEVICE: str
    VLLM_TARGET_DEVICE: str
    OMNI_CPU_TORCH_INDEX: str
    OMNI_CPU_PROBE_ONLY: bool


def __getattr__(name: str) -> Any:
    # Module attributes are read at use, like vllm.envs: `envs.OMNI_CPU_WEIGHTS`.
    if name in KNOBS:
        return KNOBS[name].value()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *KNOBS})


def main(argv: list[str] | None = None) -> None:
    """Print the table: name, default, who reads it, what it does, and the value set here.

    `--markdown` prints the user knobs as a markdown table; `--all` adds the stage's and
    the internal ones.
    """
    args = sys.argv[1:] if argv is None else argv
    audiences = tuple(AUDIENCES) if "--all" in args else ("user",)
    if "--markdown" in args:
        sys.stdout.write("\n".join(markdown_table(audiences)) + "\n")
        return
    for knob in KNOBS.values():
        if knob.audience not in audiences:
            continue
        now = os.environ.get(knob.name)
        shown = f" (set: {now})" if now is not None else ""
        sys.stdout.write(
            f"{knob.name}={knob.default!s:<8} [{knob.read_by}, {knob.audience}] {knob.doc}{shown}\n"
        )


if __name__ == "__main__":
    main()
