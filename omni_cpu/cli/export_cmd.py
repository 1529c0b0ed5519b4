"""`omni-cpu export k8s`: Kubernetes objects for a checked-in deploy profile."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from omni_cpu.cli.common import err_console
from omni_cpu.export.image import DEFAULT_PORT, IMAGE

EXPORT_HELP = "Turn a deploy profile into what runs it elsewhere."

K8S_HELP = """Write a ConfigMap, Deployment and Service that serve the profile as written.

The ConfigMap holds the profile file; each pod mounts it read-only and runs `omni-cpu
serve --deploy-profile` on it, bound onto the CPUs its cgroup gives it. The pods serve
the profile's own model (its Hugging Face id); --model names another copy of it (a
folder in the pod) and is refused where its size or kind is not the profile's.

Pods get Guaranteed QoS: integer CPU requests equal to limits (the profile's stage cores
plus the reserved front-end CPU, each with its SMT siblings: --threads-per-core, or a
dump of a node with --sysroot) and memory requests equal to limits (the profile's
budget). They meet Pod Security "restricted" with a read-only root filesystem; the
model, its packed weights and uploaded voices live on --model-claim (a
PersistentVolumeClaim; default: an emptyDir, downloaded again at each start, whose
sizeLimit and the pod's ephemeral-storage request come from the model's footprint).
Rollouts replace pods in place (maxSurge 0), one at a time or --max-unavailable's
count. The comments on top list the kubelet settings this relies on.

The image defaults to {image}, which the repo's Containerfile builds (`make image`):

  podman build -t {image} -f Containerfile .      (or docker build)

Examples:

  omni-cpu export k8s --profile deploy.yaml > tts.yaml
  kubectl apply -f tts.yaml

  omni-cpu export k8s --profile deploy.yaml --replicas 4 \\
      --threads-per-core 2 --model-claim tts-models \\
      --max-unavailable 1 --image registry/{image}
"""

export_app = typer.Typer(help=EXPORT_HELP, no_args_is_help=True)


# `k8s`'s options (typer's Annotated style): the signature is one line each.
ProfilePath = Annotated[Path, typer.Option("--profile", help="The deploy profile (YAML).")]
Replicas = Annotated[int, typer.Option("--replicas", min=1, help="Pods in the Deployment.")]
Image = Annotated[
    str,
    typer.Option("--image", help="Container image with omni-cpu and its runtime (Containerfile)."),
]
Model = Annotated[
    str | None,
    typer.Option(
        "--model", help="Model the pods serve (default: the profile's, by its Hugging Face id)."
    ),
]
Port = Annotated[int, typer.Option("--port", help="Container and Service port.")]
Name = Annotated[str, typer.Option("--name", help="Name of the Kubernetes objects.")]
Replica = Annotated[
    int, typer.Option("--replica", min=0, help="Which of the profile's replicas each pod runs.")
]
ThreadsPerCore = Annotated[
    int | None,
    typer.Option(
        "--threads-per-core",
        min=1,
        help="SMT threads per core on the nodes (default: --sysroot's, else 1).",
    ),
]
Sysroot = Annotated[
    Path | None,
    typer.Option(
        "--sysroot",
        help="A dump of a node (omni-cpu probe --sysroot): its SMT width; exit 5 where "
        "the runtime cannot serve it, as probe judges it.",
    ),
]
ModelClaim = Annotated[
    str | None,
    typer.Option(
        "--model-claim",
        help="PersistentVolumeClaim for the model, packed weights and voices (default: emptyDir).",
    ),
]
DrainTimeout = Annotated[
    int,
    typer.Option(
        "--drain-timeout", min=0, help="Seconds a stopping pod drains requests in flight."
    ),
]
MaxUnavailable = Annotated[
    int | None,
    typer.Option(
        "--max-unavailable",
        min=1,
        help="Also write a PodDisruptionBudget: at most this many pods evicted at once (fewer "
        "than --replicas); rollouts replace as many at a time (default 1).",
    ),
]
AsJson = Annotated[bool, typer.Option("--json", help="One JSON v1 List, not YAML.")]
Output = Annotated[Path | None, typer.Option("--output", "-o", help="Write here, not stdout.")]


@export_app.command("k8s", help=K8S_HELP.format(image=IMAGE))
def k8s(
    profile_path: ProfilePath,
    replicas: Replicas = 1,
    image: Image = IMAGE,
    model: Model = None,
    port: Port = DEFAULT_PORT,
    name: Name = "omni-cpu-tts",
    replica: Replica = 0,
    threads_per_core: ThreadsPerCore = None,
    sysroot: Sysroot = None,
    model_claim: ModelClaim = None,
    drain_timeout: DrainTimeout = 30,
    max_unavailable: MaxUnavailable = None,
    as_json: AsJson = False,
    output: Output = None,
) -> None:
    from omni_cpu.errors import InputError
    from omni_cpu.export.k8s import check_disruption, k8s_manifests
    from omni_cpu.export.pod import PodOptions
    from omni_cpu.export.served_model import served_model
    from omni_cpu.export.sizing import pod_size
    from omni_cpu.output import check_output_path
    from omni_cpu.profile import load_profile

    if output is not None:
        check_output_path(output, option="--output")
    disruption = check_disruption(replicas, max_unavailable)
    if disruption is not None:
        raise InputError(*disruption)
    profile = load_profile(profile_path)
    if replica >= len(profile.replicas):
        raise InputError(
            f"--replica {replica}: the profile has {len(profile.replicas)} replica(s)",
            f"use 0..{len(profile.replicas) - 1}",
        )
    pods_model = served_model(profile, model)
    threads_per_core, threads_source = _node_threads(threads_per_core, sysroot)
    size = pod_size(profile, _footprint(profile.model), replica, threads_per_core)
    options = PodOptions(
        image=image, model=pods_model, port=port, drain_timeout_s=drain_timeout,
        model_claim=model_claim,
    )  # fmt: skip
    manifests = k8s_manifests(
        profile_path.read_text(), size, options, replicas=replicas, name=name,
        replica=replica, max_unavailable=max_unavailable,
    )  # fmt: skip
    if as_json:
        from omni_cpu.export.k8s import render_json

        text = render_json(manifests)
    else:
        from omni_cpu.export.k8s import render_manifests

        text = render_manifests(
            manifests, size, profile_name=profile_path.name, model=pods_model,
            dtype=profile.dtype, replica=replica, threads_source=threads_source,
            storage_bytes=size.ephemeral_storage_bytes(data_on_node=not model_claim),
        )  # fmt: skip
    _write(text, output)


def _footprint(model: str):
    """The profile's model footprint, or None where the model is not one omni-cpu sizes."""
    from omni_cpu.errors import ModelError
    from omni_cpu.plan.footprint import footprint_for_model

    try:
        return footprint_for_model(model)
    except ModelError:
        return None


def _node_threads(threads_per_core: int | None, sysroot: Path | None) -> tuple[int, str]:
    """The nodes' threads per core, and where that number came from (the manifest says)."""
    from omni_cpu.export.sizing import node_threads_per_core
    from omni_cpu.hardware import read_facts
    from omni_cpu.plan.support import unsupported_machine

    threads_source = "--threads-per-core"
    if sysroot is not None:
        node = read_facts(sysroot)
        # The node is judged as probe judges it (plan.support), before anything is written.
        unsupported = unsupported_machine(node, "export for nodes the runtime serves")
        if unsupported is not None:
            raise unsupported
        if threads_per_core is None:
            # Not the dump's path: the manifest says nothing of the machine that exported it.
            return node_threads_per_core(node), "read from the node's dump (--sysroot)"
    if threads_per_core is None:
        # Not stated: SMT-2 nodes would get half the cores; the notes on top say so.
        return 1, "assumed; give the nodes' with --threads-per-core or --sysroot"
    return threads_per_core, threads_source


def _write(text: str, output: Path | None) -> None:
    """The manifests to stdout, or to --output (said on stderr)."""
    from omni_cpu.output import write_text_output

    if output is None:
        typer.echo(text, nl=False)
    else:
        write_text_output(output, text)
        err_console.print(f"wrote {output}")


def register(app: typer.Typer) -> None:
    app.add_typer(export_app, name="export")
