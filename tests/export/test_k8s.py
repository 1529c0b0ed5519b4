"""`omni-cpu export k8s`: manifests that validate offline and size pods from the profile."""

from __future__ import annotations

import subprocess

import kubernetes_validate
import pytest
import yaml

from omni_cpu.cpulist import parse_cpu_list
from tests.helpers.cli import omni_cpu

K8S_VERSION = "1.30.0"


def export(*args: str) -> subprocess.CompletedProcess[str]:
    return omni_cpu("export", "k8s", *args)


@pytest.fixture(scope="module")
def documents(profile_file):
    done = export("--profile", str(profile_file[0]), "--replicas", "3", "--image", "reg/omni:1")
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def test_every_object_validates_against_the_kubernetes_schemas(documents):
    assert [doc["kind"] for doc in documents] == ["Deployment", "Service"]
    for doc in documents:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_pods_get_guaranteed_qos_sized_by_the_profile(documents, profile_file):
    _, profile = profile_file
    container = documents[0]["spec"]["template"]["spec"]["containers"][0]
    requests, limits = container["resources"]["requests"], container["resources"]["limits"]
    assert requests == limits
    cores = set(parse_cpu_list(profile.replicas[0].frontend_cpus))
    for stage in profile.replicas[0].stages:
        cores |= set(parse_cpu_list(stage.cpus))
    assert limits["cpu"] == str(len(cores))  # an integer: exclusive CPUs
    assert limits["memory"].endswith("Mi")
    kv = sum(stage.kv_cache_memory_bytes for stage in profile.stages)
    assert int(limits["memory"][:-2]) * 2**20 > kv


def test_pods_run_serve_planning_for_their_own_cgroup(documents):
    spec = documents[0]["spec"]
    container = spec["template"]["spec"]["containers"][0]
    assert spec["replicas"] == 3
    assert container["image"] == "reg/omni:1"
    assert container["command"] == ["omni-cpu", "serve"]
    assert container["args"][container["args"].index("--deploy-profile") + 1] == "auto"
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    assert {"name": "VLLM_TARGET_DEVICE", "value": "cpu"} in container["env"]


def test_shared_memory_for_the_stage_connector_is_mounted(documents):
    pod = documents[0]["spec"]["template"]["spec"]
    assert pod["volumes"][0]["emptyDir"]["medium"] == "Memory"
    assert pod["containers"][0]["volumeMounts"][0]["mountPath"] == "/dev/shm"


def test_service_targets_the_pods(documents):
    deployment, service = documents
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]


def test_output_explains_the_kubelet_settings_it_relies_on(profile_file):
    text = export("--profile", str(profile_file[0])).stdout
    assert "--cpu-manager-policy=static" in text
    assert "--topology-manager-policy=single-numa-node" in text


def test_replica_out_of_range_is_a_one_line_error(profile_file):
    done = export("--profile", str(profile_file[0]), "--replica", "9")
    assert done.returncode == 2
    assert "replica" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_stage_choice_besides_the_defaults_reaches_the_pods_stages(profile_file, tmp_path):
    # The pod plans its own profile: the talker's int8 travels as the variable that wins.
    from omni_cpu import envs
    from omni_cpu.profile import save_profile

    _, profile = profile_file
    save_profile(profile.with_choice(envs.WEIGHTS, "int8"), tmp_path / "int8.yaml")
    done = export("--profile", str(tmp_path / "int8.yaml"))
    assert done.returncode == 0, done.stderr
    deployment = next(yaml.safe_load_all(done.stdout))
    env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "OMNI_CPU_WEIGHTS", "value": "int8"} in env
    assert not any(item["name"] == "OMNI_CPU_CODE2WAV" for item in env)  # the default
