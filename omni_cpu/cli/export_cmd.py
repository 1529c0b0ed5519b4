"""`omni-cpu export k8s`: Kubernetes objects for a checked-in deploy profile."""

from __future__ import annotations

from pathlib import Path

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


@export_app.command("k8s", help=K8S_HELP.format(image=IMAGE))
def k8s(
    profile_path: Path = typer.Option(..., "--profile", help="The deploy profile (YAML)."),
    replicas: int = typer.Option(1, "--replicas", min=1, help="Pods in the Deployment."),
    image: str = typer.Option(
        IMAGE, "--image", help="Container image with omni-cpu and its runtime (Containerfile)."
    ),
    model: str | None = typer.Option(
        None,
        "--model",
        help="Model the pods serve (default: the profile's, by its Hugging Face id).",
    ),
    port: int = typer.Option(DEFAULT_PORT, "--port", help="Container and Service port."),
    name: str = typer.Option("omni-cpu-tts", "--name", help="Name of the Kubernetes objects."),
    replica: int = typer.Option(
        0, "--replica", min=0, help="Which of the profile's replicas each pod runs."
    ),
    threads_per_core: int | None = typer.Option(
        None,
        "--threads-per-core",
        min=1,
        help="SMT threads per core on the nodes (default: --sysroot's, else 1).",
    ),
    sysroot: Path | None = typer.Option(
        None,
        "--sysroot",
        help="A dump of a node (omni-cpu probe --sysroot): its SMT width; exit 5 where "
        "the runtime cannot serve it, as probe judges it.",
    ),
    model_claim: str | None = typer.Option(
        None,
        "--model-claim",
        help="PersistentVolumeClaim for the model, packed weights and voices (default: emptyDir).",
    ),
    drain_timeout: int = typer.Option(
        30, "--drain-timeout", min=0, help="Seconds a stopping pod drains requests in flight."
    ),
    max_unavailable: int | None = typer.Option(
        None,
        "--max-unavailable",
        min=1,
        help="Also write a PodDisruptionBudget: at most this many pods evicted at once (fewer "
        "than --replicas); rollouts replace as many at a time (default 1).",
    ),
    as_json: bool = typer.Option(False, "--json", help="One JSON v1 List, not YAML."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write here, not stdout."),
) -> None:
    from omni_cpu.errors import InputError, ModelError
    from omni_cpu.export.k8s import (
        check_disruption,
        k8s_manifests,
        render_json,
        render_manifests,
    )
    from omni_cpu.export.pod import PodOptions
    from omni_cpu.export.served_model import served_model
    from omni_cpu.export.sizing import node_threads_per_core, pod_size
    from omni_cpu.hardware import read_facts
    from omni_cpu.output import check_output_path, write_text_output
    from omni_cpu.plan.footprint import footprint_for_model
    from omni_cpu.plan.support import unsupported_machine
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
    try:
        footprint = footprint_for_model(profile.model)
    except ModelError:
        footprint = None
    threads_source = "--threads-per-core"
    if sysroot is not None:
        node = read_facts(sysroot)
        # The node is judged as probe judges it (plan.support), before anything is written.
        unsupported = unsupported_machine(node, "export for nodes the runtime serves")
        if unsupported is not None:
            raise unsupported
    if threads_per_core is None and sysroot is not None:
        threads_per_core = node_threads_per_core(node)
        # Not the dump's path: the manifest says nothing of the machine that exported it.
        threads_source = "read from the node's dump (--sysroot)"
    elif threads_per_core is None:
        # Not stated: SMT-2 nodes would get half the cores; the notes on top say so.
        threads_per_core = 1
        threads_source = "assumed; give the nodes' with --threads-per-core or --sysroot"
    size = pod_size(profile, footprint, replica, threads_per_core)
    options = PodOptions(
        image=image, model=pods_model, port=port, drain_timeout_s=drain_timeout,
        model_claim=model_claim,
    )  # fmt: skip
    manifests = k8s_manifests(
        profile_path.read_text(), size, options, replicas=replicas, name=name,
        replica=replica, max_unavailable=max_unavailable,
    )  # fmt: skip
    if as_json:
        text = render_json(manifests)
    else:
        text = render_manifests(
            manifests, size, profile_name=profile_path.name, model=pods_model,
            dtype=profile.dtype, replica=replica, threads_source=threads_source,
            storage_bytes=size.ephemeral_storage_bytes(data_on_node=not model_claim),
        )  # fmt: skip
    if output is None:
        typer.echo(text, nl=False)
    else:
        write_text_output(output, text)
        err_console.print(f"wrote {output}")


def register(app: typer.Typer) -> None:
    app.add_typer(export_app, name="export")
