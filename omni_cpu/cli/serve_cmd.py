"""`omni-cpu serve`: run vLLM-Omni's OpenAI-compatible speech server with a profile applied."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from omni_cpu.cli.common import VERBOSE_HELP, WEIGHTS_HELP, console, err_console, print_json

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
lists, an http(s) URL the server fetches (within OMNI_CPU_SERVE_REF_AUDIO_FETCH_S).

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


def serve(
    model: str = typer.Option(..., "--model", help="Checkpoint folder or Hugging Face id."),
    deploy_profile: str = typer.Option(
        "auto", "--deploy-profile", help="'auto' (plan this machine now) or a profile YAML."
    ),
    replica: int = typer.Option(
        0, "--replica", min=0, help="Which of the profile's replicas (one per NUMA node)."
    ),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    port: int = typer.Option(8000, "--port", min=1, max=65535, help="Port to listen on."),
    max_waiting: int | None = typer.Option(
        None,
        "--max-waiting",
        min=0,
        help="Admit max_num_seqs + this many speech requests at once, in place of the "
        "default (the profile's stall-free streams).",
    ),
    max_in_flight: int | None = typer.Option(
        None,
        "--max-in-flight",
        min=1,
        help="Speech requests admitted at once (default: the streams the profile predicts "
        "this replica carries without a gap; where it predicts none, max_num_seqs + "
        "--max-waiting).",
    ),
    max_input_chars: int | None = typer.Option(
        None,
        "--max-input-chars",
        min=0,
        help="Longest input text (default: half the talker's max_model_len; 0: no limit).",
    ),
    max_long_input_chars: int | None = typer.Option(
        None,
        "--max-long-input-chars",
        min=0,
        help="Longest input a non-streamed request may send, spoken in sentences of at most "
        "--max-input-chars each, one answer (default: 4 times --max-input-chars; 0: no split).",
    ),
    max_frames: int | None = typer.Option(
        None,
        "--max-frames",
        min=1,
        help="Codec frames (80 ms each) for requests without max_new_tokens (default: profile).",
    ),
    served_model_name: str | None = typer.Option(
        None, "--served-model-name", help="Model name clients send (default: --model)."
    ),
    drain_timeout: float = typer.Option(
        30.0, "--drain-timeout", min=0, help="Seconds SIGTERM waits for requests in flight."
    ),
    request_timeout: float = typer.Option(
        0.0,
        "--request-timeout",
        min=0,
        help="Seconds a speech request may take (504, or its stream ends); 0 = none. "
        "A request's `timeout` field may ask for less.",
    ),
    body_timeout: float | None = typer.Option(
        None,
        "--body-timeout",
        min=0,
        help="Seconds a client has to send a request's headers and body (else 408, or the "
        "connection closes); it holds no place meanwhile. Default 30; 0 = none.",
    ),
    send_timeout: float | None = typer.Option(
        None,
        "--send-timeout",
        min=0,
        help="Seconds a client may leave a reply's data untaken before its stream is cut and "
        "its place returned. Default 30; 0 = none.",
    ),
    voices: Path | None = typer.Option(
        None,
        "--voices",
        help="Folder of voices: its audio files (NAME.wav, NAME.txt the words) are uploaded "
        "once ready, and uploads are kept there (default: the server's own folder, removed "
        "at exit).",
    ),
    max_voices: int = typer.Option(
        32, "--max-voices", min=1, help="Uploaded voices the server keeps at most."
    ),
    ref_audio_dir: Path | None = typer.Option(
        None, "--ref-audio-dir", help="Folder whose files requests may name as file:// ref_audio."
    ),
    allow_ref_audio_urls: str = typer.Option(
        "",
        "--allow-ref-audio-urls",
        metavar="HOSTS",
        help="Hosts, addresses or CIDRs (comma-separated; * = any public host) whose http(s) "
        "ref_audio URLs the server fetches; loopback and private ones only when listed.",
    ),
    accept_frame_limit: bool = typer.Option(
        False,
        "--accept-frame-limit",
        help="Base requests that reach their frame budget return their audio instead of "
        "vLLM-Omni's 500 (random-weight checkpoints never emit end-of-speech).",
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Print the command, environment and deploy config; start nothing."
    ),
    force: bool = typer.Option(
        False, "--force", help="Serve a profile whose memory does not fit this machine."
    ),
    weights: str = typer.Option("model", "--weights", help=WEIGHTS_HELP),
    verbose: bool = typer.Option(False, "--verbose", help=VERBOSE_HELP),
    as_json: bool = typer.Option(False, "--json", help="With --dry-run: the plan as JSON."),
) -> None:
    from omni_cpu.launch.logs import verbose_requested
    from omni_cpu.launch.plan import with_weights
    from omni_cpu.plan.resolve import FATAL_TO_START, FORCED, resolve
    from omni_cpu.serve.command import ServeOptions, build_serve_plan

    # A bad option is refused before the machine is planned.
    options = ServeOptions(
        replica=replica,
        host=host,
        port=port,
        max_waiting=max_waiting,
        max_in_flight=max_in_flight,
        max_input_chars=max_input_chars,
        max_long_input_chars=max_long_input_chars,
        max_frames=max_frames,
        served_model_name=served_model_name,
        drain_timeout_s=drain_timeout,
        request_timeout_s=request_timeout,
        body_timeout_s=body_timeout,
        send_timeout_s=send_timeout,
        voices_dir=voices,
        max_voices=max_voices,
        ref_audio_dir=ref_audio_dir,
        allow_ref_audio_urls=allow_ref_audio_urls,
        accept_frame_limit=accept_frame_limit,
        verbose=verbose_requested(verbose),
    )
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
    if dry_run:
        _print_dry_run(plan, as_json)
        return
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

    from omni_cpu import envs
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
