"""The serve plan: the exact command, environment and deploy config `omni-cpu serve` launches.

Pure: a profile and options in, a `ServePlan` out. `--dry-run` prints it; the
supervisor runs it. Nothing here imports torch or vLLM.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from omni_cpu import envs
from omni_cpu.cpulist import format_cpu_list
from omni_cpu.errors import InputError
from omni_cpu.launch import logs, startup
from omni_cpu.platform import DRIVER_ENV
from omni_cpu.process.watch import stall_seconds
from omni_cpu.profile import Profile, deploy_config_dict
from omni_cpu.profile.model import TALKER_STAGE, Replica
from omni_cpu.serve import knobs
from omni_cpu.serve.knobs import MIDDLEWARE_PATH, AdmissionLimits

# vLLM-Omni's own CLI (the `vllm-omni` console script) behind a wrapper that skips the
# interpreter teardown (omni_cpu.serve.server): `serve MODEL --omni` starts its
# OpenAI-compatible server; run as a module so it is the venv's, whatever PATH says.
SERVER_MODULE = "omni_cpu.serve.server"


@dataclass(frozen=True)
class ServePlan:
    """One replica's API server: what to run, with what, and how to bound and stop it."""

    argv: tuple[str, ...]
    env: dict[str, str]  # set on top of the inherited environment
    # What the engines print (launch.logs, as for `run`): added where the user set none.
    log_env: dict[str, str]
    deploy_config: dict[str, Any]  # written to deploy_config_path before the start
    deploy_config_path: str
    workdir: str  # holds the deploy config and the drain flag; removed at exit
    frontend_cpus: tuple[int, ...]  # API server (and mp engine cores) once ready; () = not pinned
    replica_cpus: tuple[int, ...]  # affinity the server starts with (front end + stages)
    limits: AdmissionLimits
    host: str
    port: int
    replica: int
    drain_timeout_s: float
    stop_timeout_s: float
    notes: tuple[str, ...] = field(default_factory=tuple)
    stall_s: float = 0.0  # work held this long with no stage progress: hung (0 = never)
    voices_dir: str = ""  # serve --voices: its audio files are uploaded once ready
    progress_dir: str = ""  # where each stage counts its work steps (the stall watch reads it)

    def shell(self) -> str:
        """The plan as one shell command line (what `--dry-run` prints), one option a line."""
        lines: list[list[str]] = []
        if self.replica_cpus:
            lines.append(["taskset", "-c", format_cpu_list(self.replica_cpus)])
        lines.append(["env"])
        lines += [[f"{key}={value}"] for key, value in {**self.log_env, **self.env}.items()]
        lines.append([])
        for word in self.argv:
            if word.startswith("--") and lines[-1]:
                lines.append([])
            lines[-1].append(word)
        return " \\\n  ".join(" ".join(shlex.quote(word) for word in line) for line in lines)

    def deploy_config_yaml(self) -> str:
        return yaml.safe_dump(self.deploy_config, sort_keys=False)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["argv"] = list(self.argv)
        data["frontend_cpus"] = list(self.frontend_cpus)
        data["replica_cpus"] = list(self.replica_cpus)
        data["notes"] = list(self.notes)
        return data


WORKDIR_PREFIX = "omni-cpu-serve-"
# A long non-streamed input is split into sentences: at most this many parts by default.
LONG_INPUT_PARTS = 4
DEFAULT_MAX_VOICES = 32  # uploaded voices a server keeps (vLLM-Omni's SPEAKER_MAX_UPLOADED)


def _quiet_tracker(user_filters: str) -> str:
    """The user's warning filters, and the resource tracker's warnings off."""
    return ",".join(part for part in (user_filters, logs.TRACKER_QUIET) if part)


TMP_SUBDIR = "tmp"  # the server's own temp folder, inside its workdir
# A Unix socket's path holds at most 107 bytes (sockaddr_un); vLLM names its IPC sockets
# "<base>/<uuid4>", 37 more.
SOCKET_PATH_MAX = 107
IPC_NAME_LEN = 37


def ipc_folder(private: Path) -> str:
    """Where vLLM's IPC sockets go: the server's own folder when its path leaves room for a
    socket's name, else the temp folder this process was given (a long $TMPDIR), as before."""
    if len(os.fsencode(private)) + IPC_NAME_LEN <= SOCKET_PATH_MAX:
        return str(private)
    return tempfile.gettempdir()


def default_workdir(port: int, pid: int | None = None) -> Path:
    """This server's folder for the deploy config and drain flag: per port and process.

    Per process, so a second server started on a port in use never touches the
    first one's files (it refuses at once anyway: omni_cpu.serve.supervisor).
    """
    owner = os.getpid() if pid is None else pid
    return Path(tempfile.gettempdir()) / f"{WORKDIR_PREFIX}{port}-{owner}"


@dataclass(frozen=True)
class ServeOptions:
    """What `serve`'s flags ask for, beside the model and profile. A bad value is refused
    when the options are made (the CLI makes them before it plans the machine).

    A field named in omni_cpu.serve.knobs.SETTABLE is None where no flag gave it: its
    variable's value then, else the plan's default (`with_environment`).
    """

    replica: int = 0
    host: str = "127.0.0.1"
    port: int = 8000
    workdir: Path | None = None  # default: default_workdir(port)
    max_waiting: int | None = None
    max_in_flight: int | None = None
    max_input_chars: int | None = None
    max_long_input_chars: int | None = None
    max_frames: int | None = None
    served_model_name: str | None = None
    drain_timeout_s: float = 30.0
    stop_timeout_s: float = 15.0
    request_timeout_s: float | None = None
    body_timeout_s: float | None = None
    send_timeout_s: float | None = None  # None: the knob's default
    voices_dir: Path | None = None
    max_voices: int = DEFAULT_MAX_VOICES
    stall_s: float | None = None  # default: process.watch.stall_seconds()
    python: str = sys.executable
    ref_audio_dir: Path | None = None
    allow_ref_audio_urls: str | None = None  # hosts, addresses, CIDRs or *
    accept_frame_limit: bool | None = None
    max_body_bytes: int | None = None
    ref_audio_fetch_s: float | None = None
    verbose: bool = False

    def __post_init__(self) -> None:
        if self.max_frames is not None and self.max_frames < 1:
            raise InputError(f"--max-frames {self.max_frames}", "give at least 1 frame")
        if self.max_in_flight is not None and self.max_in_flight < 1:
            raise InputError(f"--max-in-flight {self.max_in_flight}", "give 1 or more")
        if self.max_waiting is not None and self.max_waiting < 0:
            raise InputError(f"--max-waiting {self.max_waiting}", "give 0 or more")
        if self.ref_audio_dir is not None and not self.ref_audio_dir.is_dir():
            raise InputError(
                f"--ref-audio-dir {self.ref_audio_dir} is not a directory",
                "name the folder whose files clients may send as file:// ref_audio",
            )
        if self.request_timeout_s is not None and self.request_timeout_s < 0:
            raise InputError(
                f"--request-timeout {self.request_timeout_s:g}", "give 0 (none) or more"
            )
        if self.allow_ref_audio_urls is not None:
            # One line for an entry that is no host, address or CIDR (SettingError).
            allowed = envs.SERVE_ALLOW_REF_AUDIO_URLS.read(
                self.allow_ref_audio_urls, envs.SERVE_ALLOW_REF_AUDIO_URLS.flag
            )
            object.__setattr__(self, "allow_ref_audio_urls", allowed)
        voices = self.voices_dir
        if voices is not None and voices.exists() and not voices.is_dir():
            raise InputError(f"--voices {voices} is not a directory", "name a folder for voices")


def admission_limit(
    replica: Replica, max_waiting: int | None = None, max_in_flight: int | None = None
) -> tuple[int, str]:
    """Speech requests admitted at once, and why that many.

    By default the streams the replica carries without a gap (its profile's predicted
    `stall_free_streams`, docs/listening.md); with --max-waiting, or where the profile
    predicts none (or is older than the prediction), the talker's max_num_seqs running
    plus that many waiting (default: max_num_seqs).
    """
    talker = replica.stage(TALKER_STAGE)
    if max_in_flight is not None:
        return max_in_flight, "--max-in-flight"
    stall_free = replica.capacity.stall_free_streams if replica.capacity else None
    if max_waiting is None and stall_free:
        return stall_free, "the streams this replica carries without a gap, predicted"
    waiting = talker.max_num_seqs if max_waiting is None else max_waiting
    return talker.max_num_seqs + waiting, f"{talker.max_num_seqs} running + {waiting} waiting"


def build_serve_plan(
    model: str, profile: Profile, options: ServeOptions | None = None
) -> ServePlan:
    """The plan that serves `model` with replica `options.replica` of `profile`."""
    options = with_environment(options or ServeOptions())
    replica = options.replica
    if not 0 <= replica < len(profile.replicas):
        raise InputError(
            f"--replica {replica}: the profile has {len(profile.replicas)} replica(s)",
            f"use --replica 0..{len(profile.replicas) - 1} (one per NUMA node)",
        )
    chosen = profile.replicas[replica]
    folder = options.workdir if options.workdir is not None else default_workdir(options.port)
    deploy_path = folder / f"deploy-replica{replica}.yaml"
    limits, why = _admission_limits(model, chosen, folder, options)
    stall = stall_seconds() if options.stall_s is None else options.stall_s
    voices = options.voices_dir.resolve() if options.voices_dir is not None else folder / "voices"
    env = _server_env(profile, chosen, limits, folder, voices, options.max_voices)
    envs.check({**os.environ, **env})  # a bad value: one line now, not the server's traceback
    return ServePlan(
        argv=_server_argv(model, deploy_path, options),
        env=env,
        log_env=logs.engine_log_env(options.verbose),
        deploy_config=_deploy_config(profile, options),
        deploy_config_path=str(deploy_path),
        workdir=str(folder),
        frontend_cpus=tuple(sorted(chosen.frontend_cpu_ids())),
        replica_cpus=tuple(sorted(chosen.cpu_ids())),
        limits=limits,
        host=options.host,
        port=options.port,
        replica=replica,
        drain_timeout_s=options.drain_timeout_s,
        stop_timeout_s=options.stop_timeout_s,
        notes=_notes(options, chosen, limits, why, stall, voices),
        stall_s=stall,
        voices_dir=str(voices) if options.voices_dir is not None else "",
        progress_dir=str(folder / "progress"),
    )


def _deploy_config(profile: Profile, options: ServeOptions) -> dict[str, Any]:
    """The replica's deploy config with `run`'s launch-time changes (stages start together,
    load quietly) and --max-frames as the talker's default max_tokens."""
    deploy = startup.launch_deploy_config(
        deploy_config_dict(profile, options.replica), options.verbose
    )
    if options.max_frames is not None:
        # The frame cap of a request that sets none, as `run --max-frames` has it: the
        # talker completes frame k while sampling token k+1, so N frames take N+1 tokens.
        for stage in deploy["stages"]:
            if stage["stage_id"] == TALKER_STAGE:
                params = stage.setdefault("default_sampling_params", {})
                params["max_tokens"] = options.max_frames + 1
    return deploy


def with_environment(options: ServeOptions) -> ServeOptions:
    """`options` with each serve setting no flag gave taken from its variable, where set.

    Flag and variable are one setting, declared once as its knob (omni_cpu.envs):
    `--max-in-flight 3` and OMNI_CPU_SERVE_MAX_IN_FLIGHT=3 reach the server alike, and a
    value either gives is checked as the option's.
    """
    found: dict[str, Any] = {}
    for name in knobs.SETTABLE:
        knob = knobs.knob(name)
        raw = os.environ.get(knob.name, "")
        if getattr(options, name) is None and raw.strip():
            found[name] = knob.read(raw)
    if found.get("ref_audio_dir"):
        found["ref_audio_dir"] = Path(found["ref_audio_dir"])
    return dataclasses.replace(options, **found) if found else options


def _or(given: Any, default: Any) -> Any:
    return default if given is None else given


def _admission_limits(
    model: str, chosen: Replica, folder: Path, options: ServeOptions
) -> tuple[AdmissionLimits, str]:
    """What the middleware admits, and why that many requests at once."""
    talker = chosen.stage(TALKER_STAGE)
    admitted, why = admission_limit(chosen, options.max_waiting, options.max_in_flight)
    # Text tokens never outnumber characters; half the talker's context stays for frames.
    chars = max(0, _or(options.max_input_chars, talker.max_model_len // 2))
    ref_audio_dir = options.ref_audio_dir
    defaults = AdmissionLimits()
    limits = AdmissionLimits(
        max_in_flight=admitted,
        max_input_chars=chars,
        drain_file=str(folder / "draining"),
        allow_ref_audio_urls=_or(options.allow_ref_audio_urls, defaults.allow_ref_audio_urls),
        ref_audio_fetch_s=_or(options.ref_audio_fetch_s, defaults.ref_audio_fetch_s),
        max_body_bytes=_or(options.max_body_bytes, defaults.max_body_bytes),
        accept_frame_limit=bool(options.accept_frame_limit),
        down_file=str(folder / "stage-down"),
        talker_max_model_len=talker.max_model_len,
        tokenizer=model,
        ref_audio_dir=str(ref_audio_dir.resolve()) if ref_audio_dir is not None else "",
        request_timeout_s=_or(options.request_timeout_s, defaults.request_timeout_s),
        max_long_input_chars=max(0, _or(options.max_long_input_chars, LONG_INPUT_PARTS * chars)),
        body_timeout_s=_or(options.body_timeout_s, defaults.body_timeout_s),
        send_timeout_s=_or(options.send_timeout_s, defaults.send_timeout_s),
    )
    return limits, why


def _server_env(
    profile: Profile,
    chosen: Replica,
    limits: AdmissionLimits,
    folder: Path,
    voices: Path,
    max_voices: int,
) -> dict[str, str]:
    """What the server gets on top of the inherited environment."""
    return {
        **DRIVER_ENV,
        # vLLM-Omni's own: where it stores uploaded voices and restores them from (its
        # default is a hidden folder in the user's home), and how many it keeps.
        "SPEAKER_SAMPLES_DIR": str(voices),
        "SPEAKER_MAX_UPLOADED": str(max_voices),
        # The resource tracker's lines at exit (logs.TRACKER_QUIET), thousands after a long run.
        "PYTHONWARNINGS": _quiet_tracker(os.environ.get("PYTHONWARNINGS", "")),
        # Each stage counts its work steps here; the stall watch reads them.
        envs.STAGE_PROGRESS_DIR.name: str(folder / "progress"),
        # vLLM's IPC sockets and temp files (its RPC base path is the temp folder): inside
        # the server's folder, which goes with it at every exit, a stage fault's included.
        "TMPDIR": str(folder / TMP_SUBDIR),
        "VLLM_RPC_BASE_PATH": ipc_folder(folder / TMP_SUBDIR),
        # Every node the replica's stages may take memory from (a grouped replica's nodes).
        "CPU_VISIBLE_MEMORY_NODES": ",".join(
            str(node)
            for node in sorted({n for stage in chosen.stages for n in stage.memory_node_ids()})
        ),
        **profile.env,
        # The stages' preloads as found here (omni_cpu.plan.bind): the server forks its
        # stages only when it runs with them itself (omni_cpu.launch.relaunch).
        **({"LD_PRELOAD": ":".join(profile.preload_paths)} if profile.preload_paths else {}),
        **limits.to_env(),
    }


def _server_argv(model: str, deploy_path: Path, options: ServeOptions) -> tuple[str, ...]:
    """vLLM-Omni's own `serve MODEL --omni` command line, through SERVER_MODULE."""
    argv = [
        options.python,
        "-m",
        SERVER_MODULE,
        "serve",
        model,
        "--omni",
        "--deploy-config",
        str(deploy_path),
        "--host",
        options.host,
        "--port",
        str(options.port),
        "--middleware",
        MIDDLEWARE_PATH,
    ]
    if not options.verbose:  # uvicorn's start-up lines and one access line per request and probe
        argv += ["--uvicorn-log-level", "warning"]
    if options.served_model_name:
        argv += ["--served-model-name", options.served_model_name]
    if options.ref_audio_dir is not None:
        # vLLM's own media policy: file:// URLs are read only from under this folder.
        argv += ["--allowed-local-media-path", str(options.ref_audio_dir.resolve())]
    return tuple(argv)


def _notes(
    options: ServeOptions,
    chosen: Replica,
    limits: AdmissionLimits,
    why: str,
    stall: float,
    voices: Path,
) -> tuple[str, ...]:
    """What the plan means for a client, one line each (`--dry-run` prints them)."""
    notes: list[str] = []
    if options.max_frames is not None:
        notes.append(
            f"requests without max_new_tokens stop after {options.max_frames} codec frames"
        )
    if limits.max_long_input_chars > limits.max_input_chars > 0:
        notes.append(
            f"input over {limits.max_input_chars} characters, up to "
            f"{limits.max_long_input_chars}, is spoken in sentences (one answer); longer: 400"
        )
    if options.request_timeout_s:
        notes.append(
            f"a speech request may take at most {options.request_timeout_s:g} s (504, or its "
            "stream ends); a request's `timeout` field may ask for less"
        )
    if stall:
        notes.append(
            f"a stage that holds work with no progress for {stall:g} s stops the server (exit 4; "
            f"{envs.STAGE_STALL_S.name})"
        )
    notes.append(f"at most {limits.max_in_flight} speech requests at once ({why}); more get 429")
    notes.append(
        f"uploaded voices (at most {options.max_voices}) are kept in {voices}"
        + ("" if options.voices_dir is not None else ", removed at exit (--voices DIR keeps them)")
    )
    if options.ref_audio_dir is not None:
        notes.append(
            f"ref_audio may name files under {options.ref_audio_dir.resolve()} (file://...)"
        )
    if options.accept_frame_limit:
        notes.append("Base requests that reach their frame budget return their audio (no 500)")
    notes.append(
        f"ref_audio URLs on {options.allow_ref_audio_urls} are fetched by admission (within "
        f"{limits.ref_audio_fetch_s:g} s each to connect and to read; others get 400)"
        if options.allow_ref_audio_urls
        else "ref_audio http(s) URLs get 400 (send base64 data: audio, or --allow-ref-audio-urls)"
    )
    if chosen.frontend_cpus:
        notes.append(
            f"once ready, the API server moves to CPUs {chosen.frontend_cpus} (engine cores "
            "run their stage's model and stay on its CPUs)"
        )
    return tuple(notes)
