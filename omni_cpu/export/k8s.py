"""A profile as Kubernetes objects: ConfigMap, Deployment, Service, PodDisruptionBudget. Pure.

The profile travels as written: a ConfigMap holds the reviewed file and the pods run
`omni-cpu serve --deploy-profile` on it (omni_cpu.export.pod), sized from one replica
(omni_cpu.export.sizing) with Guaranteed QoS. A hash of the file in the pod template
rolls the Deployment when the profile changes.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import yaml

from omni_cpu import __version__
from omni_cpu.export.pod import (
    PROFILE_KEY,
    PodOptions,
    pod_security_context,
    pod_volumes,
    serve_container,
    termination_grace_s,
)
from omni_cpu.export.sizing import MIB, PodSize

PROFILE_HASH_ANNOTATION = "omni-cpu/profile-sha256"


class _PlainDumper(yaml.SafeDumper):
    """Writes repeated dicts (the labels) out in full: no &id001 anchors to puzzle reviewers."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _literal_blocks(dumper: yaml.SafeDumper, text: str) -> yaml.Node:
    """Multi-line text (the profile in the ConfigMap) as a `|` block, readable as the file."""
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_PlainDumper.add_representer(str, _literal_blocks)

KUBELET_NOTES = """\
# omni-cpu {version}: Kubernetes objects for the deploy profile {profile}
# (model {model}, {dtype}), each pod sized from replica {replica}:
#   CPUs: {cores} cores x {threads} thread(s) per core = {cpus} ({threads_source})
#   memory: {memory_gib:.1f} GiB; ephemeral storage: {storage_gib:.1f} GiB
# Rollouts replace one pod at a time (maxSurge 0): a surge pod would wait for exclusive
# cores no node keeps spare.
# The pods run this profile as written, mounted from the ConfigMap, bound onto the
# CPUs the kubelet gives them.
#
# The pods get Guaranteed QoS (integer CPU requests equal to limits, memory requests
# equal to limits). They rely on these kubelet settings on the nodes:
#   --cpu-manager-policy=static          exclusive CPUs for Guaranteed pods, so the
#                                        stages' OpenMP threads never share a core
#   --cpu-manager-policy-options=full-pcpus-only=true   whole physical cores (SMT)
#   --topology-manager-policy=single-numa-node   a pod's CPUs and memory on one node
#   --memory-manager-policy=Static       (optional) NUMA-local memory for the pod
#   --reserved-cpus=...                  keep system daemons off the pods' CPUs
# The CPU request counts every SMT sibling of the cores the profile binds: the static
# CPU manager hands out whole cores first, so fewer would give the stages fewer cores.
"""


def profile_config_map(name: str, labels: dict[str, str], profile_text: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels},
        "data": {PROFILE_KEY: profile_text},
    }


def k8s_manifests(
    profile_text: str,
    size: PodSize,
    options: PodOptions,
    *,
    replicas: int = 1,
    name: str = "omni-cpu-tts",
    replica: int = 0,
    max_unavailable: int | None = None,
) -> list[dict[str, Any]]:
    """ConfigMap (the profile), Deployment, Service and, given `max_unavailable`, a PDB."""
    storage = size.ephemeral_storage_bytes(data_on_node=not options.model_claim)
    resources = {
        "cpu": str(size.cpus),
        "memory": f"{size.memory_bytes // MIB}Mi",
        "ephemeral-storage": f"{-(-storage // MIB)}Mi",
    }
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "omni-cpu"}
    config_map = f"{name}-profile"
    digest = hashlib.sha256(profile_text.encode()).hexdigest()
    pod = {
        "securityContext": pod_security_context(),
        # SIGTERM drains in-flight requests; the grace covers preStop, drain and stop.
        "terminationGracePeriodSeconds": termination_grace_s(options.drain_timeout_s),
        "containers": [serve_container(options, replica, resources)],
        "volumes": pod_volumes(options, config_map, size.data_bytes),
    }
    strategy = rolling_update(max_unavailable)
    manifests = [
        profile_config_map(config_map, labels, profile_text),
        _deployment(name, labels, replicas, pod, {PROFILE_HASH_ANNOTATION: digest}, strategy),
        _service(name, labels, options.port),
    ]
    if max_unavailable is not None:
        manifests.append(_disruption_budget(name, labels, max_unavailable))
    return manifests


def rolling_update(max_unavailable: int | None) -> dict[str, Any]:
    """Replace pods in place: a surge pod would need exclusive cores no node keeps spare, so
    it would sit Pending and stall the rollout; one pod (or the PDB's count) goes at a time."""
    return {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 0, "maxUnavailable": max_unavailable or 1},
    }


def check_disruption(replicas: int, max_unavailable: int | None) -> tuple[str, str] | None:
    """(why, the fix) where `max_unavailable` does not suit `replicas` pods: a budget that
    lets a drain evict every pod protects nothing. None where it suits, or none is asked."""
    if max_unavailable is None or max_unavailable < replicas:
        return None
    why = (
        f"--max-unavailable {max_unavailable} with --replicas {replicas} lets a drain evict "
        f"every pod"
    )
    if replicas == 1:
        return why, "give --replicas 2 or more, or leave --max-unavailable out"
    return why, f"give --max-unavailable {replicas - 1} or less"


def _deployment(
    name: str,
    labels: dict[str, str],
    replicas: int,
    pod: dict[str, Any],
    annotations: dict[str, str],
    strategy: dict[str, Any],
) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "strategy": strategy,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels, "annotations": annotations},
                "spec": pod,
            },
        },
    }


def _service(name: str, labels: dict[str, str], port: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "selector": labels,
            "ports": [{"name": "http", "port": port, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def _disruption_budget(name: str, labels: dict[str, str], max_unavailable: int) -> dict[str, Any]:
    """Voluntary evictions (node drains) take at most this many pods at once."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "labels": labels},
        "spec": {"maxUnavailable": max_unavailable, "selector": {"matchLabels": labels}},
    }


def render_manifests(
    manifests: list[dict[str, Any]],
    size: PodSize,
    *,
    profile_name: str,
    model: str,
    dtype: str,
    replica: int = 0,
    threads_source: str = "--threads-per-core",
    storage_bytes: int = 0,
) -> str:
    """Multi-document YAML with the kubelet notes on top (`storage_bytes`: the pod's
    ephemeral-storage request)."""
    header = KUBELET_NOTES.format(
        version=__version__,
        profile=profile_name,
        model=model,
        dtype=dtype,
        replica=replica,
        cores=size.cores,
        threads=size.threads_per_core,
        threads_source=threads_source,
        cpus=size.cpus,
        memory_gib=size.memory_bytes / 2**30,
        storage_gib=storage_bytes / 2**30,
    )
    body = "---\n".join(yaml.dump(doc, Dumper=_PlainDumper, sort_keys=False) for doc in manifests)
    return header + "---\n" + body


def render_json(manifests: list[dict[str, Any]]) -> str:
    """One v1 List of the objects: `kubectl apply -f` takes it as it is."""
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": manifests}, indent=2) + "\n"
