"""A profile as a Kubernetes Deployment + Service with Guaranteed QoS. Pure.

The pods are sized from the profile (one pipeline replica's cores and memory) and
plan their own placement at start-up with `--deploy-profile auto`: inside a pod
the probe reads the cgroup's cpuset and memory limit, so CPU ids chosen by the
kubelet's static CPU manager are the ones bound, not the host's the profile names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import yaml

from omni_cpu import __version__, envs
from omni_cpu.export.image import DEFAULT_PORT, HEALTH_PATH, IMAGE, IMAGE_USER_ID, SERVE_COMMAND
from omni_cpu.plan.footprint import ModelFootprint
from omni_cpu.plan.policy import replica_fixed_memory_bytes
from omni_cpu.profile import choices
from omni_cpu.profile.model import Profile


class _PlainDumper(yaml.SafeDumper):
    """Writes repeated dicts (the labels) out in full: no &id001 anchors to puzzle reviewers."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


MIB = 1 << 20
# vLLM-Omni's SharedMemoryConnector moves codec chunks through /dev/shm, which a
# container gets only 64 MiB of by default; this much is mounted and counted.
SHM_BYTES = 1024 * MIB
# Head-room over the planned peak so a burst does not OOM-kill the pod.
MEMORY_HEADROOM_FRACTION = 0.10

KUBELET_NOTES = """\
# omni-cpu {version}: Kubernetes objects for the deploy profile {profile}
# (model {model}, {dtype}, sized from replica {replica}: {cpus} CPUs, {memory_gib:.1f} GiB).
#
# The pods get Guaranteed QoS (integer CPU requests equal to limits, memory requests
# equal to limits). They rely on these kubelet settings on the nodes:
#   --cpu-manager-policy=static          exclusive CPUs for Guaranteed pods, so the
#                                        stages' OpenMP threads never share a core
#   --cpu-manager-policy-options=full-pcpus-only=true   whole physical cores (SMT)
#   --topology-manager-policy=single-numa-node   a pod's CPUs and memory on one node
#   --memory-manager-policy=Static       (optional) NUMA-local memory for the pod
#   --reserved-cpus=...                  keep system daemons off the pods' CPUs
# Inside a pod, `--deploy-profile auto` plans for the pod's cgroup cpuset and memory
# limit, so the CPU ids the kubelet chose are the ones bound.
"""


@dataclass(frozen=True)
class PodSize:
    cpus: int
    memory_bytes: int


def pod_size(profile: Profile, footprint: ModelFootprint | None, replica: int = 0) -> PodSize:
    """Integer CPUs (stage cores + front end) and memory for one replica's pod."""
    chosen = profile.replicas[replica]
    memory = sum(stage.kv_cache_memory_bytes for stage in chosen.stages) + SHM_BYTES
    if footprint is not None:
        memory += replica_fixed_memory_bytes(footprint, profile.dtype)
    memory = math.ceil(memory * (1 + MEMORY_HEADROOM_FRACTION) / MIB) * MIB
    return PodSize(cpus=len(chosen.cpu_ids()), memory_bytes=memory)


def k8s_manifests(
    profile: Profile,
    footprint: ModelFootprint | None,
    *,
    model: str,
    image: str = IMAGE,
    replicas: int = 1,
    port: int = DEFAULT_PORT,
    name: str = "omni-cpu-tts",
    replica: int = 0,
) -> list[dict[str, Any]]:
    """A Deployment and a Service running `omni-cpu serve` sized by the profile."""
    size = pod_size(profile, footprint, replica)
    resources = {"cpu": str(size.cpus), "memory": f"{size.memory_bytes // MIB}Mi"}
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "omni-cpu"}
    container = _serve_container(profile, replica, model, image, port, resources)
    return [_deployment(name, labels, replicas, container), _service(name, labels, port)]


def _serve_container(
    profile: Profile,
    replica: int,
    model: str,
    image: str,
    port: int,
    resources: dict[str, str],
) -> dict[str, Any]:
    """The pod's one container: `omni-cpu serve` planning its own cgroup, probed on /health."""
    env = [{"name": envs.TARGET_DEVICE.name, "value": "cpu"}]
    env += [
        {"name": key, "value": value}
        for key, value in sorted(profile.env.items())
        # Host library paths do not exist in the image; the pod's probe finds its own.
        if key != "LD_PRELOAD"
    ]
    # The pod plans its own profile (`auto`): what this one's stages choose besides the
    # defaults travels as the variables, which win over the entries (omni_cpu.profile.choices).
    env += [
        {"name": key, "value": value}
        for stage in profile.replicas[replica].stages
        for key, value in sorted(choices.as_env(stage.choices, stage.stage_id).items())
    ]
    return {
        "name": "omni-cpu",
        "image": image,
        "command": list(SERVE_COMMAND),
        "args": [
            "--model",
            model,
            "--deploy-profile",
            "auto",
            "--host",
            "0.0.0.0",
            "--port",
            str(port),
        ],
        "env": env,
        "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
        "resources": {"requests": dict(resources), "limits": dict(resources)},
        "readinessProbe": {
            "httpGet": {"path": HEALTH_PATH, "port": "http"},
            "periodSeconds": 5,
            "failureThreshold": 3,
        },
        "startupProbe": {
            # Two engines load on few cores: allow up to 10 minutes to become ready.
            "httpGet": {"path": HEALTH_PATH, "port": "http"},
            "periodSeconds": 10,
            "failureThreshold": 60,
        },
        "livenessProbe": {
            "httpGet": {"path": HEALTH_PATH, "port": "http"},
            "periodSeconds": 20,
            "failureThreshold": 3,
        },
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
        # The image's user; nothing in it needs root.
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": IMAGE_USER_ID,
            "allowPrivilegeEscalation": False,
        },
    }


def _deployment(
    name: str, labels: dict[str, str], replicas: int, container: dict[str, Any]
) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    # SIGTERM drains in-flight requests; give it time before SIGKILL.
                    "terminationGracePeriodSeconds": 60,
                    "containers": [container],
                    "volumes": [
                        {
                            "name": "dshm",
                            "emptyDir": {"medium": "Memory", "sizeLimit": f"{SHM_BYTES // MIB}Mi"},
                        }
                    ],
                },
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


def render_manifests(
    manifests: list[dict[str, Any]], profile: Profile, profile_name: str, replica: int = 0
) -> str:
    """Multi-document YAML with the kubelet notes on top."""
    container = manifests[0]["spec"]["template"]["spec"]["containers"][0]
    limits = container["resources"]["limits"]
    header = KUBELET_NOTES.format(
        version=__version__,
        profile=profile_name,
        model=profile.model,
        dtype=profile.dtype,
        replica=replica,
        cpus=limits["cpu"],
        memory_gib=int(limits["memory"].removesuffix("Mi")) / 1024,
    )
    body = "---\n".join(yaml.dump(doc, Dumper=_PlainDumper, sort_keys=False) for doc in manifests)
    return header + "---\n" + body
