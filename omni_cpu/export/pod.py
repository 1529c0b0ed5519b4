"""The pod that runs a profile: its containers, its volumes, its security. Pure.

Its serving container runs `omni-cpu serve --deploy-profile` on the profile file mounted from a
ConfigMap, so every reviewed value (weights, chunk schedule, KV bytes, max seqs,
sampling, admission, calibration) is what the pod runs; `serve` binds the profile's
shape onto the CPUs of the pod's cgroup. The pod meets Pod Security "restricted" and
keeps its root filesystem read-only: everything `serve` and its stages write goes to
the volumes below.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omni_cpu import envs
from omni_cpu.export.image import (
    HEALTH_PATH,
    IMAGE_HOME,
    IMAGE_USER_ID,
    SERVE_COMMAND,
)
from omni_cpu.export.sizing import HOME_BYTES, MIB, SHM_BYTES, TMP_BYTES

# The ConfigMap's profile, mounted read-only.
PROFILE_DIR = "/etc/omni-cpu"
PROFILE_KEY = "profile.yaml"
PROFILE_PATH = f"{PROFILE_DIR}/{PROFILE_KEY}"
# The model volume: the Hugging Face cache (the model's download), the packed-weight
# cache and uploaded voices, kept across restarts where it is a claim. No kernel cache: the
# image carries every kernel variant of its architecture built ahead, inside the package.
DATA_DIR = "/var/lib/omni-cpu"
HF_HOME = f"{DATA_DIR}/huggingface"
WEIGHT_CACHE_DIR = f"{DATA_DIR}/packed"
VOICES_DIR = f"{DATA_DIR}/voices"
# SIGTERM comes after the preStop hook: by then the endpoints controller has taken the
# pod out of the Service, so the drain sees no new requests from it.
PRESTOP_SLEEP_S = 5
# After the drain, `serve` stops the stages (serve's default stop timeout, which this
# floor cannot import) and exits; a margin over it.
STAGE_STOP_S = 15
EXIT_MARGIN_S = 10


@dataclass(frozen=True)
class PodOptions:
    """What the command line chooses about the pod besides its size."""

    image: str
    model: str
    port: int
    drain_timeout_s: int = 30
    model_claim: str | None = None  # a PersistentVolumeClaim for DATA_DIR; None: emptyDir


def termination_grace_s(drain_timeout_s: int) -> int:
    """Seconds the kubelet waits before SIGKILL: preStop, the drain, the stages' stop."""
    return PRESTOP_SLEEP_S + drain_timeout_s + STAGE_STOP_S + EXIT_MARGIN_S


def serve_args(options: PodOptions, replica: int) -> list[str]:
    return [
        "--model",
        options.model,
        "--deploy-profile",
        PROFILE_PATH,
        "--replica",
        str(replica),
        "--host",
        "0.0.0.0",
        "--port",
        str(options.port),
        "--drain-timeout",
        str(options.drain_timeout_s),
        "--voices",
        VOICES_DIR,
    ]


def _container_security() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": IMAGE_USER_ID,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def serve_container(options: PodOptions, replica: int, resources: dict[str, str]) -> dict[str, Any]:
    """The pod's one container: `omni-cpu serve` on the mounted profile, probed on /health."""
    env = {
        envs.TARGET_DEVICE.name: "cpu",
        "HF_HOME": HF_HOME,
        envs.WEIGHT_CACHE.name: WEIGHT_CACHE_DIR,
    }
    health = {"httpGet": {"path": HEALTH_PATH, "port": "http"}}
    return {
        "name": "omni-cpu",
        "image": options.image,
        "command": list(SERVE_COMMAND),
        "args": serve_args(options, replica),
        "env": [{"name": key, "value": value} for key, value in env.items()],
        "ports": [{"name": "http", "containerPort": options.port, "protocol": "TCP"}],
        "resources": {"requests": dict(resources), "limits": dict(resources)},
        "readinessProbe": {**health, "periodSeconds": 5, "failureThreshold": 3},
        # Two engines load on few cores, the first start downloads the model: 20 minutes.
        "startupProbe": {**health, "periodSeconds": 10, "failureThreshold": 120},
        "livenessProbe": {**health, "periodSeconds": 20, "failureThreshold": 3},
        "lifecycle": {"preStop": {"exec": {"command": ["sleep", str(PRESTOP_SLEEP_S)]}}},
        "volumeMounts": [
            {"name": "profile", "mountPath": PROFILE_DIR, "readOnly": True},
            {"name": "data", "mountPath": DATA_DIR},
            {"name": "home", "mountPath": IMAGE_HOME},
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "dshm", "mountPath": "/dev/shm"},
        ],
        "securityContext": _container_security(),
    }


def pod_volumes(
    options: PodOptions, config_map: str, data_bytes: int | None = None
) -> list[dict[str, Any]]:
    """The profile (read-only), the model volume (`data_bytes` its emptyDir's limit, where
    the model's size is known), and the writable scratch the caches use."""
    data: dict[str, Any] = {"persistentVolumeClaim": {"claimName": options.model_claim}}
    if not options.model_claim:
        data = {"emptyDir": {} if data_bytes is None else {"sizeLimit": _mib(data_bytes)}}
    return [
        {"name": "profile", "configMap": {"name": config_map}},
        {"name": "data", **data},
        # ~/.cache and ~/.config of vLLM, torch and vLLM-Omni.
        {"name": "home", "emptyDir": {"sizeLimit": _mib(HOME_BYTES)}},
        {"name": "tmp", "emptyDir": {"sizeLimit": _mib(TMP_BYTES)}},
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": _mib(SHM_BYTES)}},
    ]


def _mib(size_bytes: int) -> str:
    return f"{-(-size_bytes // MIB)}Mi"


def pod_security_context() -> dict[str, Any]:
    """Non-root with the image's user and group; fsGroup makes the claim writable to it."""
    return {
        "runAsNonRoot": True,
        "runAsUser": IMAGE_USER_ID,
        "runAsGroup": IMAGE_USER_ID,
        "fsGroup": IMAGE_USER_ID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
