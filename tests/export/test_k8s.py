"""`omni-cpu export k8s`: the pods serve the profile file as reviewed, and the objects validate."""

from __future__ import annotations

import copy
import json
import subprocess

import kubernetes_validate
import pytest
import yaml

from omni_cpu.profile import parse_profile, save_profile
from tests.export.pod_security import restricted_violations
from tests.helpers import sysroots
from tests.helpers.cli import omni_cpu

# The oldest Kubernetes still served upstream and the newest whose schemas the pinned
# kubernetes-validate ships.
K8S_VERSIONS = ("1.30.0", "1.37.0")


def export(*args: str) -> subprocess.CompletedProcess[str]:
    return omni_cpu("export", "k8s", *args)


def exported(*args: str) -> list[dict]:
    done = export(*args)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def by_kind(documents: list[dict], kind: str) -> dict:
    return next(doc for doc in documents if doc["kind"] == kind)


def pod_of(documents: list[dict]) -> dict:
    return by_kind(documents, "Deployment")["spec"]["template"]["spec"]


@pytest.fixture(scope="module")
def documents(profile_file):
    return exported(
        "--profile", str(profile_file[0]), "--replicas", "3", "--image", "reg/omni:1",
        "--max-unavailable", "1", "--model-claim", "tts-models",
    )  # fmt: skip


@pytest.fixture(scope="module")
def profile_1_7b(tmp_path_factory, profile_file):
    from omni_cpu.plan import PlanOptions, footprint_for_model, plan_profile
    from tests.helpers.machines import machine

    big = machine({0: list(range(12)), 1: list(range(12, 24))}, smt=2)
    profile = plan_profile(big, footprint_for_model("1.7b-base"), PlanOptions(reserve=1))
    path = tmp_path_factory.mktemp("k8s17") / "deploy-1.7b.yaml"
    save_profile(profile, path)
    return path


def test_every_object_validates_against_the_kubernetes_schemas(documents):
    kinds = [doc["kind"] for doc in documents]
    assert kinds == ["ConfigMap", "Deployment", "Service", "PodDisruptionBudget"]
    for version in K8S_VERSIONS:
        for doc in documents:
            kubernetes_validate.validate(doc, version, strict=True)


def test_the_default_export_validates_too(profile_file):
    for doc in exported("--profile", str(profile_file[0])):
        kubernetes_validate.validate(doc, K8S_VERSIONS[-1], strict=True)


def test_the_pod_meets_pod_security_restricted(documents):
    assert restricted_violations(pod_of(documents)) == []


def test_the_restricted_check_catches_what_the_old_pod_lacked(documents):
    # The check itself fails where a control is missing: no seccomp, no capability drop.
    pod = copy.deepcopy(pod_of(documents))
    del pod["securityContext"]["seccompProfile"]
    context = pod["containers"][0]["securityContext"]
    del context["seccompProfile"]
    del context["capabilities"]
    context["allowPrivilegeEscalation"] = True
    pod["volumes"].append({"name": "host", "hostPath": {"path": "/"}})
    found = "\n".join(restricted_violations(pod))
    for control in ("seccomp", "does not drop ALL", "privilege escalation", "hostPath"):
        assert control in found


def test_the_root_filesystem_is_read_only_and_caches_live_on_volumes(documents):
    pod = pod_of(documents)
    container = pod["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    env = {item["name"]: item["value"] for item in container["env"]}
    args = container["args"]
    writable = [
        env["HF_HOME"], env["OMNI_CPU_WEIGHT_CACHE"],
        args[args.index("--voices") + 1], "/tmp", "/home/omni/.cache", "/dev/shm",
    ]  # fmt: skip
    for path in writable:
        mount = max((m for m in mounts if path == m or path.startswith(m + "/")), key=len)
        assert mounts[mount] != "profile", path
        assert set(volumes[mounts[mount]]) & {"emptyDir", "persistentVolumeClaim"}, path
    # The model and its packed weights survive restarts on the claim.
    assert volumes[mounts["/var/lib/omni-cpu"]]["persistentVolumeClaim"] == {
        "claimName": "tts-models"
    }
    assert env["HF_HOME"].startswith("/var/lib/omni-cpu/")


def test_the_pod_serves_the_profile_file_mounted_from_the_config_map(documents, profile_file):
    path, profile = profile_file
    config_map = by_kind(documents, "ConfigMap")
    assert config_map["data"]["profile.yaml"] == path.read_text()  # the file as reviewed
    assert parse_profile(config_map["data"]["profile.yaml"]) == profile
    pod = pod_of(documents)
    container = pod["containers"][0]
    assert container["command"] == ["omni-cpu", "serve"]
    profile_arg = container["args"][container["args"].index("--deploy-profile") + 1]
    (mount,) = [m for m in container["volumeMounts"] if profile_arg.startswith(m["mountPath"])]
    assert mount["readOnly"] is True
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
    assert profile_arg == f"{mount['mountPath']}/profile.yaml"


def test_no_setting_of_the_profile_travels_beside_the_file(profile_file, tmp_path):
    # A choice (int8 weights) reaches the pod in the file; no variable overrides it.
    from omni_cpu import envs

    _, profile = profile_file
    path = tmp_path / "int8.yaml"
    save_profile(profile.with_choice(envs.WEIGHTS, "int8"), path)
    documents = exported("--profile", str(path))
    served = parse_profile(by_kind(documents, "ConfigMap")["data"]["profile.yaml"])
    assert served.choice(envs.WEIGHTS) == "int8"
    names = {item["name"] for item in pod_of(documents)["containers"][0]["env"]}
    # Only where the pod's caches live, and the target device vLLM needs before it reads.
    caches = {"HF_HOME", "OMNI_CPU_WEIGHT_CACHE"}
    assert names == {"VLLM_TARGET_DEVICE", *caches}


def test_a_changed_profile_rolls_the_deployment(profile_file, tmp_path):
    from omni_cpu import envs

    path, profile = profile_file
    save_profile(profile.with_choice(envs.WEIGHTS, "int8"), tmp_path / "int8.yaml")
    before = by_kind(exported("--profile", str(path)), "Deployment")
    after = by_kind(exported("--profile", str(tmp_path / "int8.yaml")), "Deployment")
    key = "omni-cpu/profile-sha256"
    assert (
        before["spec"]["template"]["metadata"]["annotations"][key]
        != (after["spec"]["template"]["metadata"]["annotations"][key])
    )


def test_the_model_is_the_profiles(profile_file, profile_1_7b):
    args = pod_of(exported("--profile", str(profile_file[0])))["containers"][0]["args"]
    assert args[args.index("--model") + 1] == "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice"
    args = pod_of(exported("--profile", str(profile_1_7b)))["containers"][0]["args"]
    assert args[args.index("--model") + 1] == "Qwen/Qwen3-TTS-12Hz-1.7B-Base"


def test_a_model_of_the_profiles_size_and_kind_is_served(profile_1_7b):
    folder = "/models/Qwen3-TTS-12Hz-1.7B-Base"
    pod = pod_of(exported("--profile", str(profile_1_7b), "--model", folder))
    args = pod["containers"][0]["args"]
    assert args[args.index("--model") + 1] == folder


@pytest.mark.parametrize(
    "model, named",
    [("Qwen/Qwen3-TTS-12Hz-0.6B-Base", "0.6B"), ("Qwen/Qwen3-TTS-12Hz-1.7B-VoiceDesign", "voice")],
)
def test_a_model_that_contradicts_the_profile_is_refused_in_one_line(profile_1_7b, model, named):
    done = export("--profile", str(profile_1_7b), "--model", model)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1
    assert model in done.stderr and named in done.stderr and "1.7B base" in done.stderr


def test_a_profile_of_an_unpublished_model_needs_model(tmp_path, profile_file):
    import dataclasses

    _, profile = profile_file
    save_profile(dataclasses.replace(profile, model="qwen3-tts-12hz-tiny"), tmp_path / "t.yaml")
    done = export("--profile", str(tmp_path / "t.yaml"))
    assert done.returncode == 2 and "--model" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def cpu_request(documents: list[dict]) -> str:
    pod = pod_of(documents)
    for container in pod.get("initContainers", []) + pod["containers"]:  # Guaranteed: every one
        resources = container["resources"]
        assert resources["requests"] == resources["limits"], container["name"]
    return pod["containers"][0]["resources"]["limits"]["cpu"]


def test_pods_get_guaranteed_qos_sized_by_the_profile(documents, profile_file):
    _, profile = profile_file
    limits = pod_of(documents)["containers"][0]["resources"]["limits"]
    assert cpu_request(documents) == str(len(profile.replicas[0].cpu_ids()))  # no SMT named
    assert limits["memory"].endswith("Mi")
    kv = sum(stage.kv_cache_memory_bytes for stage in profile.stages)
    assert int(limits["memory"][:-2]) * 2**20 > kv


def test_the_cpu_request_counts_the_smt_siblings_of_every_bound_core(profile_file):
    # The plan binds one CPU per core; the static CPU manager hands out whole cores.
    path, profile = profile_file
    cores = len(profile.replicas[0].cpu_ids())
    documents = exported("--profile", str(path), "--threads-per-core", "2")
    assert cpu_request(documents) == str(2 * cores)


def test_the_smt_width_comes_from_a_dump_of_a_node(profile_file, unpacked_dumps):
    dump = next(d for d in sysroots.load_dumps() if d.id == "ul-x86_64-epyc_7451")
    assert dump.expected["threads_per_core"] == 2
    path, profile = profile_file
    documents = exported("--profile", str(path), "--sysroot", str(unpacked_dumps.root(dump)))
    assert cpu_request(documents) == str(2 * len(profile.replicas[0].cpu_ids()))


def test_a_profile_whose_stages_bind_siblings_requests_its_cpus_once(profile_file, tmp_path):
    # A stage with smt_siblings lists whole cores' CPUs: the kubelet gives exactly those.
    path, profile = profile_file
    text = path.read_text().replace("smt_siblings: false", "smt_siblings: true")
    assert "smt_siblings: true" in text
    siblings = tmp_path / "siblings.yaml"
    siblings.write_text(text)
    documents = exported("--profile", str(siblings), "--threads-per-core", "2")
    cpus = len(profile.replicas[0].cpu_ids())
    assert cpu_request(documents) == str(cpus + cpus % 2)


def test_the_cpu_request_of_a_plan_that_binds_siblings_counts_them_once():
    from omni_cpu.export.sizing import pod_cpu_request

    assert pod_cpu_request(6, threads_per_core=2) == 12
    assert pod_cpu_request(6, threads_per_core=2, binds_siblings=True) == 6
    assert pod_cpu_request(5, threads_per_core=2, binds_siblings=True) == 6  # whole cores
    assert pod_cpu_request(3, threads_per_core=1) == 3


def test_stopping_lets_serves_drain_finish(documents):
    pod = pod_of(documents)
    container = pod["containers"][0]
    args = container["args"]
    drain_s = int(args[args.index("--drain-timeout") + 1])
    pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    # SIGTERM comes after preStop; serve drains, then stops its stages (15 s at most).
    assert pod["terminationGracePeriodSeconds"] >= int(pre_stop[1]) + drain_s + 15


def test_a_longer_drain_gets_a_longer_grace(profile_file):
    pod = pod_of(exported("--profile", str(profile_file[0]), "--drain-timeout", "300"))
    args = pod["containers"][0]["args"]
    assert args[args.index("--drain-timeout") + 1] == "300"
    assert pod["terminationGracePeriodSeconds"] > 300


def test_the_disruption_budget_selects_the_pods(documents):
    budget = by_kind(documents, "PodDisruptionBudget")
    deployment = by_kind(documents, "Deployment")
    assert budget["spec"]["selector"] == deployment["spec"]["selector"]
    assert budget["spec"]["maxUnavailable"] == 1


def test_no_disruption_budget_unless_asked(profile_file):
    kinds = [doc["kind"] for doc in exported("--profile", str(profile_file[0]))]
    assert kinds == ["ConfigMap", "Deployment", "Service"]


def test_json_is_one_list_of_the_same_objects(profile_file):
    args = ("--profile", str(profile_file[0]), "--replicas", "3", "--max-unavailable", "2")
    done = export(*args, "--json")
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)
    assert (listed["apiVersion"], listed["kind"]) == ("v1", "List")
    assert listed["items"] == exported(*args)


def test_service_targets_the_pods(documents):
    deployment, service = by_kind(documents, "Deployment"), by_kind(documents, "Service")
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert deployment["spec"]["replicas"] == 3
    assert pod_of(documents)["containers"][0]["image"] == "reg/omni:1"


def test_shared_memory_for_the_stage_connector_is_mounted(documents):
    pod = pod_of(documents)
    (shm,) = [m for m in pod["containers"][0]["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == shm["name"]]
    assert volume["emptyDir"]["medium"] == "Memory"


def test_output_explains_the_kubelet_settings_it_relies_on(profile_file):
    text = export("--profile", str(profile_file[0])).stdout
    assert "--cpu-manager-policy=static" in text
    assert "--topology-manager-policy=single-numa-node" in text


def test_replica_out_of_range_is_a_one_line_error(profile_file):
    done = export("--profile", str(profile_file[0]), "--replica", "9")
    assert done.returncode == 2
    assert "replica" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_each_pod_runs_the_replica_that_sized_it(profile_file):
    pod = pod_of(exported("--profile", str(profile_file[0]), "--replica", "1"))
    args = pod["containers"][0]["args"]
    assert args[args.index("--replica") + 1] == "1"


def test_the_notes_say_where_the_threads_per_core_came_from(profile_file):
    assumed = export("--profile", str(profile_file[0])).stdout
    assert "1 thread(s) per core = " in assumed and "(assumed; give the nodes' with" in assumed
    stated = export("--profile", str(profile_file[0]), "--threads-per-core", "2").stdout
    assert "2 thread(s) per core = " in stated and "(--threads-per-core)" in stated


def test_the_pod_needs_no_kernel_cache_the_image_carries_its_kernels_built_ahead(documents):
    """No seed container, no kernel cache variable or mount: a run imports the prebuilt ones."""
    pod = pod_of(documents)
    assert "initContainers" not in pod
    (serving,) = pod["containers"]
    assert "OMNI_CPU_KERNEL_CACHE" not in {e["name"] for e in serving["env"]}
    assert not [
        m for m in serving["volumeMounts"] if "kernels" in m["mountPath"] + m.get("subPath", "")
    ]


# -- the pod's disk, its rollout and its budget ------------------------------------------


def _storage(container: dict) -> int:
    quantity = container["resources"]["requests"]["ephemeral-storage"]
    assert container["resources"]["limits"]["ephemeral-storage"] == quantity
    assert quantity.endswith("Mi")
    return int(quantity[:-2]) << 20


def test_the_model_volume_and_the_disk_request_are_sized_from_the_footprint(profile_file):
    from omni_cpu.plan import footprint_for_model

    pod = pod_of(exported("--profile", str(profile_file[0])))
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    data_limit = int(volumes["data"]["emptyDir"]["sizeLimit"][:-2]) << 20
    footprint = footprint_for_model("0.6b")
    download = 2 * (footprint.talker_params + footprint.code2wav_params)
    assert download < data_limit < 3 * download
    limits = sum(
        int(volume["emptyDir"]["sizeLimit"][:-2]) << 20
        for volume in volumes.values()
        if "sizeLimit" in volume.get("emptyDir", {})
        and volume["emptyDir"].get("medium") != "Memory"
    )
    assert _storage(pod["containers"][0]) == limits
    for doc in exported("--profile", str(profile_file[0])):
        kubernetes_validate.validate(doc, K8S_VERSIONS[-1], strict=True)


def test_a_model_claim_keeps_the_model_off_the_disk_request(documents, profile_file):
    claimed = pod_of(documents)
    on_node = pod_of(exported("--profile", str(profile_file[0])))
    assert _storage(claimed["containers"][0]) < _storage(on_node["containers"][0])
    (data,) = [v for v in claimed["volumes"] if v["name"] == "data"]
    assert data == {"name": "data", "persistentVolumeClaim": {"claimName": "tts-models"}}


def test_rollouts_replace_pods_without_a_surge(documents, profile_file):
    strategy = by_kind(documents, "Deployment")["spec"]["strategy"]
    assert strategy == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
    }
    default = by_kind(exported("--profile", str(profile_file[0])), "Deployment")
    assert default["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}


@pytest.mark.parametrize(("replicas", "most"), [("2", "5"), ("3", "3"), ("1", "1")])
def test_a_budget_that_lets_a_drain_evict_every_pod_is_refused(profile_file, replicas, most):
    args = ("--profile", str(profile_file[0]), "--replicas", replicas)
    done = export(*args, "--max-unavailable", most)
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert f"--max-unavailable {most} with --replicas {replicas}" in line
