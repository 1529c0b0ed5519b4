"""`omni-cpu export k8s`: Kubernetes objects for a checked-in deploy profile."""

from __future__ import annotations

from pathlib import Path

import typer

from omni_cpu.cli.common import err_console
from omni_cpu.export.image import DEFAULT_PORT, IMAGE

EXPORT_HELP = "Turn a deploy profile into what runs it elsewhere."

K8S_HELP = """Write a Kubernetes Deployment and Service that run `omni-cpu serve`.

Pods get Guaranteed QoS: integer CPU requests equal to limits (the profile's stage cores
plus the reserved front-end CPU) and memory requests equal to limits (the profile's
budget). The comments on top list the kubelet settings this relies on (static CPU
manager, single-numa-node topology policy).

The image defaults to {image}, which the repo's Containerfile builds (its entrypoint
runs `omni-cpu serve` as a non-root user, with a health check on /health):

  podman build -t {image} -f Containerfile .      (or docker build)

Examples:

  omni-cpu export k8s --profile deploy.yaml > tts.yaml
  kubectl apply -f tts.yaml

  omni-cpu export k8s --profile deploy.yaml --replicas 4 \\
      --image registry/{image}
"""

export_app = typer.Typer(help=EXPORT_HELP, no_args_is_help=True)


@export_app.command("k8s", help=K8S_HELP.format(image=IMAGE))
def k8s(
    profile_path: Path = typer.Option(..., "--profile", help="The deploy profile (YAML)."),
    replicas: int = typer.Option(1, "--replicas", min=1, help="Pods in the Deployment."),
    image: str = typer.Option(
        IMAGE, "--image", help="Container image with omni-cpu and its runtime (Containerfile)."
    ),
    model: str = typer.Option(
        "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice", "--model", help="Model the pods serve."
    ),
    port: int = typer.Option(DEFAULT_PORT, "--port", help="Container and Service port."),
    name: str = typer.Option("omni-cpu-tts", "--name", help="Name of the Deployment/Service."),
    replica: int = typer.Option(
        0, "--replica", min=0, help="Which of the profile's replicas sizes a pod."
    ),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write here, not stdout."),
) -> None:
    from omni_cpu.errors import InputError, ModelError
    from omni_cpu.export.k8s import k8s_manifests, render_manifests
    from omni_cpu.output import check_output_path, write_text_output
    from omni_cpu.plan.footprint import footprint_for_model
    from omni_cpu.profile import load_profile

    if output is not None:
        check_output_path(output, option="--output")
    profile = load_profile(profile_path)
    if replica >= len(profile.replicas):
        raise InputError(
            f"--replica {replica}: the profile has {len(profile.replicas)} replica(s)",
            f"use 0..{len(profile.replicas) - 1}",
        )
    try:
        footprint = footprint_for_model(profile.model)
    except ModelError:
        footprint = None
    manifests = k8s_manifests(
        profile, footprint, model=model, image=image, replicas=replicas, port=port,
        name=name, replica=replica,
    )  # fmt: skip
    text = render_manifests(manifests, profile, profile_path.name, replica)
    if output is None:
        typer.echo(text, nl=False)
    else:
        write_text_output(output, text)
        err_console.print(f"wrote {output}")


def register(app: typer.Typer) -> None:
    app.add_typer(export_app, name="export")
