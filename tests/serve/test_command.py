"""The serve plan and `serve --dry-run`: the command, environment and config, nothing started."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
import yaml

from omni_cpu import envs
from omni_cpu.cpulist import format_cpu_list, parse_cpu_list
from omni_cpu.errors import InputError
from omni_cpu.plan import PlanOptions, footprint_for_model, plan_profile
from omni_cpu.profile import load_profile, save_profile
from omni_cpu.serve import ServeOptions, build_serve_plan
from omni_cpu.serve.knobs import MIDDLEWARE_PATH
from tests.helpers.cli import omni_cpu
from tests.helpers.machines import machine

REPO = Path(__file__).resolve().parents[2]
EIGHT_NODES = REPO / "profiles" / "epyc-7451-2s-8node.yaml"


@pytest.fixture(scope="module")
def two_node_profile():
    """Two NUMA nodes of 12 cores: each replica reserves a front-end CPU."""
    big = machine({0: list(range(12)), 1: list(range(12, 24))}, smt=2)
    return plan_profile(big, footprint_for_model("0.6b"), PlanOptions(reserve=1))


def option(argv: tuple[str, ...], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_replica_n_binds_its_stages_and_memory_to_node_n():
    profile = load_profile(EIGHT_NODES)
    plan = build_serve_plan("ckpt", profile, ServeOptions(replica=5, port=8005))
    assert plan.env["CPU_VISIBLE_MEMORY_NODES"] == "5"
    cpu_env = {s["stage_id"]: s["env"] for s in plan.deploy_config["platforms"]["cpu"]["stages"]}
    for stage in profile.replicas[5].stages:
        assert cpu_env[stage.stage_id]["VLLM_CPU_OMP_THREADS_BIND"] == stage.cpus
        assert cpu_env[stage.stage_id]["CPU_VISIBLE_MEMORY_NODES"] == "5"


def test_deploy_config_carries_the_replicas_kv_bytes_and_batch_limits():
    profile = load_profile(EIGHT_NODES)
    plan = build_serve_plan("ckpt", profile, ServeOptions(replica=2))
    stages = {s["stage_id"]: s for s in plan.deploy_config["stages"]}
    for stage in profile.replicas[2].stages:
        assert stages[stage.stage_id]["kv_cache_memory_bytes"] == stage.kv_cache_memory_bytes
        assert stages[stage.stage_id]["max_num_seqs"] == stage.max_num_seqs
    extra = plan.deploy_config["connectors"]["connector_of_shared_memory"]["extra"]
    assert extra["codec_chunk_frames"] == profile.streaming.codec_chunk_frames


def test_command_is_vllm_omnis_own_server_with_the_cpu_platform_and_middleware():
    plan = build_serve_plan(
        "ckpt", load_profile(EIGHT_NODES), ServeOptions(host="127.0.0.1", port=8123)
    )
    assert plan.argv[1:6] == ("-m", "omni_cpu.serve.server", "serve", "ckpt", "--omni")
    assert option(plan.argv, "--deploy-config") == plan.deploy_config_path
    assert option(plan.argv, "--port") == "8123"
    assert option(plan.argv, "--middleware") == MIDDLEWARE_PATH
    assert plan.env["VLLM_TARGET_DEVICE"] == "cpu"


def test_queue_limit_is_max_num_seqs_plus_the_waiting_cap():
    profile = load_profile(EIGHT_NODES)
    seqs = profile.replicas[0].stage(0).max_num_seqs
    assert build_serve_plan("m", profile).limits.max_in_flight == 2 * seqs
    plan = build_serve_plan("m", profile, ServeOptions(max_waiting=3))
    assert plan.env[envs.SERVE_MAX_IN_FLIGHT.name] == str(seqs + 3)


def test_input_limit_defaults_to_half_the_talker_context():
    profile = load_profile(EIGHT_NODES)
    plan = build_serve_plan("m", profile)
    half_context = profile.replicas[0].stage(0).max_model_len // 2
    assert plan.env[envs.SERVE_MAX_INPUT_CHARS.name] == str(half_context)


def test_drain_flag_lives_in_the_per_port_workdir():
    plan = build_serve_plan("m", load_profile(EIGHT_NODES), ServeOptions(port=8077))
    assert plan.env[envs.SERVE_DRAIN_FILE.name] == str(Path(plan.workdir) / "draining")
    assert Path(plan.deploy_config_path).parent == Path(plan.workdir)
    # Per port and per process: a second server never touches the first one's files.
    assert plan.workdir.endswith(f"omni-cpu-serve-8077-{os.getpid()}")


def test_max_frames_caps_the_talkers_default_max_tokens_as_run_does():
    # N frames take N+1 talker tokens (launch.pipeline asks the same for run --max-frames N).
    plan = build_serve_plan("m", load_profile(EIGHT_NODES), ServeOptions(max_frames=48))
    talker = next(s for s in plan.deploy_config["stages"] if s["stage_id"] == 0)
    assert talker["default_sampling_params"]["max_tokens"] == 49


def test_reserved_frontend_cpus_pin_the_api_server(two_node_profile):
    plan = build_serve_plan("m", two_node_profile, ServeOptions(replica=1))
    reserved = two_node_profile.replicas[1].frontend_cpus
    assert reserved
    assert plan.frontend_cpus == parse_cpu_list(reserved)


def test_server_starts_on_its_replicas_cpus_only(two_node_profile):
    plan = build_serve_plan("m", two_node_profile, ServeOptions(replica=1))
    replica = two_node_profile.replicas[1]
    expected = set(parse_cpu_list(replica.frontend_cpus))
    for stage in replica.stages:
        expected |= set(parse_cpu_list(stage.cpus))
    assert set(plan.replica_cpus) == expected
    assert not expected & set(
        build_serve_plan("m", two_node_profile, ServeOptions(replica=0)).replica_cpus
    )
    assert plan.shell().startswith(f"taskset -c {format_cpu_list(plan.replica_cpus)}")


def test_replica_past_the_profile_is_a_user_error():
    with pytest.raises(InputError, match="8 replica"):
        build_serve_plan("m", load_profile(EIGHT_NODES), ServeOptions(replica=8))


def test_dry_run_prints_command_env_and_config(tiny_checkpoint, tmp_path):
    # Without importing the runtime: tests/test_import_light.py.
    profile = plan_profile(machine({0: [0, 1]}), footprint_for_model("tiny"), PlanOptions())
    save_profile(profile, tmp_path / "deploy.yaml")
    done = omni_cpu(
        "serve", "--model", str(tiny_checkpoint), "--deploy-profile", str(tmp_path / "deploy.yaml"),
        "--port", "8099", "--dry-run",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "VLLM_TARGET_DEVICE=cpu" in done.stdout
    assert f"omni_cpu.serve.server serve {tiny_checkpoint}" in done.stdout
    assert "--deploy-config /" in done.stdout
    config_text = done.stdout.split("deploy-replica0.yaml:\n", 1)[1]
    assert yaml.safe_load(config_text)["stages"][0]["stage_id"] == 0


def test_dry_run_json_is_the_plan(tiny_checkpoint, tmp_path):
    profile = plan_profile(machine({0: [0, 1]}), footprint_for_model("tiny"), PlanOptions())
    save_profile(profile, tmp_path / "deploy.yaml")
    done = omni_cpu(
        "serve", "--model", str(tiny_checkpoint), "--deploy-profile", str(tmp_path / "deploy.yaml"),
        "--dry-run", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["argv"][3:5] == ["serve", str(tiny_checkpoint)]
    assert plan["env"]["CPU_VISIBLE_MEMORY_NODES"] == "0"
    assert plan["limits"]["max_in_flight"] > 0


def test_ref_audio_dir_becomes_vllms_allowed_local_media_path(tmp_path):
    profile = load_profile(next(Path("profiles").glob("*.yaml")))
    plan = build_serve_plan("m", profile, ServeOptions(workdir=tmp_path, ref_audio_dir=tmp_path))
    argv = list(plan.argv)
    assert argv[argv.index("--allowed-local-media-path") + 1] == str(tmp_path.resolve())
    assert plan.limits.allow_ref_audio_urls == ""
    assert plan.env["OMNI_CPU_SERVE_ALLOW_REF_AUDIO_URLS"] == ""
    # The middleware checks file:// clips under the same folder as base64 ones.
    assert plan.env["OMNI_CPU_SERVE_REF_AUDIO_DIR"] == str(tmp_path.resolve())


def test_a_ref_audio_dir_that_is_not_a_folder_is_refused(tmp_path):
    with pytest.raises(InputError, match="not a directory"):
        ServeOptions(workdir=tmp_path, ref_audio_dir=tmp_path / "nope")


def test_a_grouped_replica_serves_with_memory_from_every_node_of_its_group():
    small_nodes = machine({n: [2 * n, 2 * n + 1] for n in range(4)}, memory_per_node=5 << 30)
    profile = plan_profile(small_nodes, footprint_for_model("0.6b"), PlanOptions())
    assert len(profile.replicas) == 2
    plan = build_serve_plan("ckpt", profile, ServeOptions(replica=1, port=8001))
    assert plan.env["CPU_VISIBLE_MEMORY_NODES"] == "2,3"


def test_serve_starts_the_stages_together_and_quietly_like_run():
    plan = build_serve_plan("ckpt", load_profile(EIGHT_NODES), ServeOptions(port=8123))
    stages = plan.deploy_config["stages"]
    assert [stage["devices"] for stage in stages] == [str(s["stage_id"]) for s in stages]
    assert all(stage["use_tqdm_on_load"] is False for stage in stages)
    assert plan.log_env["VLLM_LOGGING_LEVEL"] == "ERROR"
    assert option(plan.argv, "--uvicorn-log-level") == "warning"


def test_verbose_serve_shows_the_engines_and_uvicorns_logs():
    plan = build_serve_plan(
        "ckpt", load_profile(EIGHT_NODES), ServeOptions(port=8123, verbose=True)
    )
    assert plan.log_env["VLLM_LOGGING_LEVEL"] == "INFO"
    assert "--uvicorn-log-level" not in plan.argv
    assert "use_tqdm_on_load" not in plan.deploy_config["stages"][0]


def test_a_log_level_the_user_set_reaches_the_server():
    from omni_cpu.launch import logs

    plan = build_serve_plan("ckpt", load_profile(EIGHT_NODES), ServeOptions(port=8123))
    env = {"VLLM_LOGGING_LEVEL": "DEBUG", "PYTHONWARNINGS": "error::DeprecationWarning"}
    logs.merge_log_env(env, plan.log_env)
    assert env["VLLM_LOGGING_LEVEL"] == "DEBUG"
    assert env["PYTHONWARNINGS"].startswith("error::DeprecationWarning,ignore:")


def test_admission_defaults_to_the_streams_the_replica_carries_without_a_gap():
    profile = load_profile(EIGHT_NODES)
    replica = profile.replicas[0]
    carries = dataclasses.replace(
        replica, capacity=dataclasses.replace(replica.capacity, stall_free_streams=3)
    )
    ramped = dataclasses.replace(profile, replicas=(carries, *profile.replicas[1:]))
    plan = build_serve_plan("m", ramped)
    assert plan.limits.max_in_flight == 3
    assert any("without a gap" in note for note in plan.notes)
    # --max-waiting asks for the talker's batch plus a queue; --max-in-flight says it outright.
    seqs = replica.stage(0).max_num_seqs
    assert (
        build_serve_plan("m", ramped, ServeOptions(max_waiting=2)).limits.max_in_flight == seqs + 2
    )
    assert build_serve_plan("m", ramped, ServeOptions(max_in_flight=5)).limits.max_in_flight == 5


def test_a_replica_predicted_to_carry_no_gap_free_stream_admits_its_batch_and_queue():
    profile = load_profile(EIGHT_NODES)
    assert profile.replicas[0].capacity.stall_free_streams == 0
    seqs = profile.replicas[0].stage(0).max_num_seqs
    assert build_serve_plan("m", profile).limits.max_in_flight == 2 * seqs


def test_max_in_flight_below_one_is_refused():
    with pytest.raises(InputError, match="--max-in-flight"):
        ServeOptions(max_in_flight=0)


LEAKS_SHARED_MEMORY = """
import os
from multiprocessing import shared_memory
segments = [shared_memory.SharedMemory(create=True, size=4096) for _ in range(20)]
for segment in segments:  # gone behind the tracker's back, as the stage guard sweeps them
    os.remove("/dev/shm/" + segment.name.lstrip("/"))
os._exit(0)
"""


def _tracker_lines(env: dict[str, str]) -> list[str]:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", LEAKS_SHARED_MEMORY],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return [line for line in done.stderr.splitlines() if "resource_tracker" in line]


def test_the_server_stops_without_the_resource_trackers_lines():
    plan = build_serve_plan("ckpt", load_profile(EIGHT_NODES))
    bare = {key: value for key, value in os.environ.items() if key != "PYTHONWARNINGS"}
    assert _tracker_lines(bare)  # what a long-running server printed by the thousand
    assert _tracker_lines({**bare, "PYTHONWARNINGS": plan.env["PYTHONWARNINGS"]}) == []


def test_the_users_own_warning_filters_are_kept(monkeypatch):
    monkeypatch.setenv("PYTHONWARNINGS", "error::DeprecationWarning")
    plan = build_serve_plan("ckpt", load_profile(EIGHT_NODES))
    assert plan.env["PYTHONWARNINGS"].startswith("error::DeprecationWarning,")


def test_uploaded_voices_live_in_the_servers_own_folder_unless_voices_names_one(tmp_path):
    plan = build_serve_plan(
        "ckpt", load_profile(EIGHT_NODES), ServeOptions(workdir=tmp_path / "work")
    )
    assert plan.env["SPEAKER_SAMPLES_DIR"] == str(tmp_path / "work" / "voices")  # removed at exit
    kept = build_serve_plan(
        "ckpt",
        load_profile(EIGHT_NODES),
        ServeOptions(voices_dir=tmp_path / "voices", max_voices=5),
    )
    assert kept.env["SPEAKER_SAMPLES_DIR"] == str((tmp_path / "voices").resolve())
    assert kept.env["SPEAKER_MAX_UPLOADED"] == "5"
    assert kept.voices_dir == str((tmp_path / "voices").resolve())


def test_stages_count_their_steps_in_the_servers_folder(tmp_path):
    plan = build_serve_plan(
        "ckpt", load_profile(EIGHT_NODES), ServeOptions(workdir=tmp_path / "work")
    )
    assert plan.env[envs.STAGE_PROGRESS_DIR.name] == plan.progress_dir
    assert plan.progress_dir.startswith(str(tmp_path / "work"))


def _dry_run(tmp_path: Path, model: Path, **environ: str) -> object:
    profile = plan_profile(machine({0: [0, 1]}), footprint_for_model("tiny"), PlanOptions())
    save_profile(profile, tmp_path / "deploy.yaml")
    return omni_cpu(
        "serve", "--model", str(model), "--deploy-profile", str(tmp_path / "deploy.yaml"),
        "--dry-run", "--json", env={**os.environ, **environ},
    )  # fmt: skip


def test_the_body_limit_a_user_sets_reaches_the_server(tmp_path, tiny_checkpoint):
    done = _dry_run(tmp_path, tiny_checkpoint, OMNI_CPU_SERVE_MAX_BODY_BYTES="4096")
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["limits"]["max_body_bytes"] == 4096
    assert plan["env"]["OMNI_CPU_SERVE_MAX_BODY_BYTES"] == "4096"


@pytest.mark.parametrize(
    ("name", "value"),
    [("OMNI_CPU_STAGE_STALL_S", "30s"), ("OMNI_CPU_SERVE_MAX_BODY_BYTES", "24M")],
)
def test_a_knob_with_a_typo_is_refused_in_one_line_before_anything_starts(
    tmp_path, tiny_checkpoint, name, value
):
    done = _dry_run(tmp_path, tiny_checkpoint, **{name: value})
    assert done.returncode == 2, done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{name}={value!r} is not allowed" in lines[0], done.stderr


def test_vllms_sockets_go_in_the_servers_folder_when_a_sockets_path_fits():
    from omni_cpu.serve.command import ipc_folder

    short = Path("/tmp/omni-cpu-serve-8000-1234/tmp")
    assert ipc_folder(short) == str(short)
    deep = Path("/tmp") / ("x" * 80) / "tmp"  # a socket's path holds 107 bytes
    assert ipc_folder(deep) != str(deep) and len(ipc_folder(deep)) < len(str(deep))
