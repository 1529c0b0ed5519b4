"""`omni-cpu serve`: run vLLM-Omni's OpenAI-compatible speech server with a profile applied."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from omni_cpu import envs
from omni_cpu.cli.common import VERBOSE_HELP, WEIGHTS_HELP, console, err_console, print_json
from omni_cpu.cli.settings import knob_option, read_option

if TYPE_CHECKING:
    from omni_cpu.plan.resolve import Resolved
    from omni_cpu.profile.model import Profile
    from omni_cpu.serve.command import ServePlan

SERVE_HELP = """Serve speech over HTTP with vLLM-Omni's own OpenAI-compatible server on CPU.

Starts `vllm-omni serve MODEL --omni` with the CPU platform selected and one replica of
the deploy profile applied: per-stage core binding, KV cache bytes, batch limits, chunk
sizes, the replica's NUMA node, and the API server pinned to the reserved front-end
CPUs. Endpoints: POST /v1/audio/speech, POST /v1/audio/speech/batch, the WebSocket
/v1/audio/speech/stream, /v1/audio/voices, GET /v1/models, /health, /metrics; every
other route vLLM-Omni mounts gets 404.

Every task type of the model is served the way vLLM-Omni serves it: `voice` for
CustomVoice, `instructions` for VoiceDesign, `ref_audio` + `ref_text` (or
`x_vector_only_mode`) for Base. `ref_audio` is base64 audio (`data:audio/wav;base64,...`),
a `file://` path under --ref-audio-dir, or, only from a host --allow-ref-audio-urls
lists, an http(s) URL the server fetches (within --ref-audio-fetch-timeout).

At most the streams the profile predicts this replica carries without a gap (p95
safe start within 1 s, docs/listening.md) are admitted at once, or --max-in-flight, or
max_num_seqs + --max-waiting where it predicts none (a batch item, a WebSocket utterance
and a voice upload count too, once their body is in); more get 429. A body not in within
--body-timeout gets 408. SIGTERM (or Ctrl-C) drains: new requests and /health get 503,
requests in flight finish (up to --drain-timeout), then every stage process is stopped.

Examples:

  omni-cpu serve --model checkpoints/0.6b --port 8000

  omni-cpu serve --model DIR --deploy-profile deploy.yaml --replica 1 \\
      --port 8001

  omni-cpu serve --model DIR --dry-run   # the command, environment, config
"""


# serve's options, one alias each (typer's Annotated style). Those that set an admission
# limit are derived from their knob (omni_cpu.cli.settings): flag, help and reading.
Model = Annotated[str, typer.Option("--model", help="Checkpoint folder or Hugging Face id.")]
DeployProfile = Annotated[
    str,
    typer.Option("--deploy-profile", help="'auto' (plan this machine now) or a profile YAML."),
]
ReplicaIndex = Annotated[
    int,
    typer.Option("--replica", min=0, help="Which of the profile's replicas (one per NUMA node)."),
]
Host = Annotated[str, typer.Option("--host", help="Address to listen on.")]
Port = Annotated[int, typer.Option("--port", min=1, max=65535, help="Port to listen on.")]
MaxWaiting = Annotated[
    int | None,
    typer.Option(
        "--max-waiting",
        min=0,
        help="Admit max_num_seqs + this many speech requests at once, in place of the "
        "default (the profile's stall-free streams).",
    ),
]
MaxFrames = Annotated[
    int | None,
    typer.Option(
        "--max-frames",
        min=1,
        help="Codec frames (80 ms each) for requests without max_new_tokens (default: profile).",
    ),
]
ServedModelName = Annotated[
    str | None,
    typer.Option("--served-model-name", help="Model name clients send (default: --model)."),
]
DrainTimeout = Annotated[
    float,
    typer.Option("--drain-timeout", min=0, help="Seconds SIGTERM waits for requests in flight."),
]
Voices = Annotated[
    Path | None,
    typer.Option(
        "--voices",
        help="Folder of voices: its audio files (NAME.wav, NAME.txt the words) are uploaded "
        "once ready, and uploads are kept there (default: the server's own folder, removed "
        "at exit).",
    ),
]
MaxVoices = Annotated[
    int, typer.Option("--max-voices", min=1, help="Uploaded voices the server keeps at most.")
]
DryRun = Annotated[
    bool,
    typer.Option(
        "--dry-run", help="Print the command, environment and deploy config; start nothing."
    ),
]
Force = Annotated[
    bool, typer.Option("--force", help="Serve a profile whose memory does not fit this machine.")
]
Weights = Annotated[str, typer.Option("--weights", help=WEIGHTS_HELP)]
Verbose = Annotated[bool, typer.Option("--verbose", help=VERBOSE_HELP)]
AsJson = Annotated[bool, typer.Option("--json", help="With --dry-run: the plan as JSON.")]
MaxInFlight = knob_option(envs.SERVE_MAX_IN_FLIGHT)
MaxInputChars = knob_option(envs.SERVE_MAX_INPUT_CHARS)
MaxLongInputChars = knob_option(envs.SERVE_MAX_LONG_INPUT_CHARS)
MaxBodyBytes = knob_option(envs.SERVE_MAX_BODY_BYTES)
RequestTimeout = knob_option(envs.SERVE_REQUEST_TIMEOUT_S)
BodyTimeout = knob_option(envs.SERVE_BODY_TIMEOUT_S)
SendTimeout = knob_option(envs.SERVE_SEND_TIMEOUT_S)
RefAudioDir = knob_option(envs.SERVE_REF_AUDIO_DIR)
AllowRefAudioUrls = knob_option(envs.SERVE_ALLOW_REF_AUDIO_URLS)
RefAudioFetchTimeout = knob_option(envs.SERVE_REF_AUDIO_FETCH_S)
AcceptFrameLimit = knob_option(envs.SERVE_ACCEPT_FRAME_LIMIT)


def serve(
    model: Model,
    deploy_profile: DeployProfile = "auto",
    replica: ReplicaIndex = 0,
    host: Host = "127.0.0.1",
    port: Port = 8000,
    max_waiting: MaxWaiting = None,
    max_in_flight: MaxInFlight = None,
    max_input_chars: MaxInputChars = None,
    max_long_input_chars: MaxLongInputChars = None,
    max_frames: MaxFrames = None,
    served_model_name: ServedModelName = None,
    drain_timeout: DrainTimeout = 30.0,
    request_timeout: RequestTimeout = None,
    body_timeout: BodyTimeout = None,
    send_timeout: SendTimeout = None,
    max_body_bytes: MaxBodyBytes = None,
    voices: Voices = None,
    max_voices: MaxVoices = 32,
    ref_audio_dir: RefAudioDir = None,
    allow_ref_audio_urls: AllowRefAudioUrls = None,
    ref_audio_fetch_timeout: RefAudioFetchTimeout = None,
    accept_frame_limit: AcceptFrameLimit = False,
    dry_run: DryRun = False,
    force: Force = False,
    weights: Weights = "model",
    verbose: Verbose = False,
    as_json: AsJson = False,
) -> None:
    from omni_cpu.launch.logs import verbose_requested
    from omni_cpu.serve.command import ServeOptions

    # parse: a bad option is refused before the machine is planned.
    settings = {
        envs.SERVE_MAX_IN_FLIGHT: max_in_flight,
        envs.SERVE_MAX_INPUT_CHARS: max_input_chars,
        envs.SERVE_MAX_LONG_INPUT_CHARS: max_long_input_chars,
        envs.SERVE_MAX_BODY_BYTES: max_body_bytes,
        envs.SERVE_REQUEST_TIMEOUT_S: request_timeout,
        envs.SERVE_BODY_TIMEOUT_S: body_timeout,
        envs.SERVE_SEND_TIMEOUT_S: send_timeout,
        envs.SERVE_REF_AUDIO_DIR: ref_audio_dir,
        envs.SERVE_ALLOW_REF_AUDIO_URLS: allow_ref_audio_urls,
        envs.SERVE_REF_AUDIO_FETCH_S: ref_audio_fetch_timeout,
        envs.SERVE_ACCEPT_FRAME_LIMIT: accept_frame_limit,
    }
    options = ServeOptions(
        replica=replica,
        host=host,
        port=port,
        max_waiting=max_waiting,
        max_frames=max_frames,
        served_model_name=served_model_name,
        drain_timeout_s=drain_timeout,
        voices_dir=voices,
        max_voices=max_voices,
        verbose=verbose_requested(verbose),
        **_read_settings(settings),
    )
    plan = _plan(model, deploy_profile, weights, force, dry_run, options)
    if dry_run:
        _print_dry_run(plan, as_json)
        return
    _run(plan, as_json)


def _read_settings(given: dict[envs.Knob, Any]) -> dict[str, Any]:
    """The ServeOptions fields the knob-derived flags gave, each read by its knob."""
    from omni_cpu.serve.knobs import SETTABLE, knob

    fields = {knob(name).name: name for name in SETTABLE}
    values = {fields[declared.name]: read_option(declared, raw) for declared, raw in given.items()}
    if values["ref_audio_dir"] is not None:
        values["ref_audio_dir"] = Path(values["ref_audio_dir"])
    return values


def _plan(
    model: str, deploy_profile: str, weights: str, force: bool, dry_run: bool, options: Any
) -> ServePlan:
    """resolve: the profile for this machine, then the serve plan, each refusal one line."""
    from omni_cpu.cli.common import check_model
    from omni_cpu.launch.plan import with_weights
    from omni_cpu.plan.resolve import FATAL_TO_START, FORCED, resolve
    from omni_cpu.serve.command import build_serve_plan

    check_model(model)  # before the machine is planned: one line for a model not there
    # The same resolver as run/bench/tune: a profile naming CPUs this machine cannot
    # give refuses to start instead of serving with its binding silently dropped.
    resolved = resolve(deploy_profile, model, weights, fatal=FORCED if force else FATAL_TO_START)
    profile = with_weights(resolved.profile, weights)
    plan = build_serve_plan(model, profile, options)  # refuses a bad knob before any hint
    if not dry_run:  # a port in use is one line, before any warning or hint
        from omni_cpu.serve.supervisor import check_port_free

        check_port_free(plan.host, plan.port)
    for problem in resolved.problems:  # e.g. a preload this runtime lacks
        err_console.print(f"[yellow]warning:[/] {problem.message}", highlight=False)
    if (hint := _formats_hint(resolved, profile)) is not None:
        err_console.print(f"[yellow]hint:[/] {hint}", highlight=False)
    return plan


def _run(plan: ServePlan, as_json: bool) -> None:
    """act: start the server and supervise it until it stops; its exit code is ours."""
    if as_json:
        err_console.print("--json only applies with --dry-run; starting the server")
    from omni_cpu.serve.supervisor import serve as run_plan

    code = run_plan(plan)
    if code:
        raise typer.Exit(code)


def _formats_hint(resolved: Resolved, profile: Profile) -> str | None:
    """Where the served format plays no stream without a gap and another would: which
    (omni_cpu.plan.formats, as `probe` says it), planned from this machine's facts."""
    import dataclasses

    from omni_cpu.plan.footprint import footprint_for_model
    from omni_cpu.plan.formats import compare_formats, format_hint, profile_options

    options = resolved.options or profile_options(profile)
    options = dataclasses.replace(options, weights=profile.choice(envs.WEIGHTS))
    footprint = resolved.footprint or footprint_for_model(None)
    return format_hint(compare_formats(resolved.facts, footprint, options))


def _print_dry_run(plan: ServePlan, as_json: bool) -> None:
    """The plan: as JSON, or its notes, command line and deploy config."""
    if as_json:
        print_json(plan.to_dict())
        return
    for note in plan.notes:
        console.print(f"# {note}", highlight=False, markup=False)
    console.print(plan.shell(), highlight=False, markup=False, soft_wrap=True)
    console.print(f"\n# {plan.deploy_config_path}:", highlight=False, markup=False)
    console.print(plan.deploy_config_yaml(), highlight=False, markup=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add `serve` to the app."""
    app.command("serve", help=SERVE_HELP)(serve)
