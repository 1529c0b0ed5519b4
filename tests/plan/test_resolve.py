"""One resolver for run, serve, bench and tune: auto or a file -> a plan checked here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from omni_cpu.errors import ProfileMismatchError, ShapeMismatchError
from omni_cpu.hardware.facts import Facts
from omni_cpu.hardware.preload import INTEL_OPENMP, find_library
from omni_cpu.hardware.probe import read_facts
from omni_cpu.launch.plan import make_launch_plan
from omni_cpu.plan import PlanOptions, footprint_for_model, plan_profile
from omni_cpu.plan.resolve import resolve
from omni_cpu.profile import load_profile, save_profile
from tests.helpers.profiles import with_talker

REPO = Path(__file__).resolve().parents[2]
EIGHT_NODES = REPO / "profiles" / "epyc-7451-2s-8node.yaml"


def test_a_plan_from_a_saved_probe_json_equals_the_live_one():
    live = read_facts("/")
    saved = Facts.from_dict(json.loads(json.dumps(live.to_dict())))
    footprint = footprint_for_model("0.6b")
    assert plan_profile(saved, footprint) == plan_profile(live, footprint)


def test_auto_is_planned_from_the_facts_it_is_given():
    facts = read_facts("/")
    resolved = resolve("auto", None, facts=facts)
    assert resolved.facts is facts and resolved.source == "auto"
    assert resolved.options is not None and resolved.options.fit_available_memory
    assert not resolved.of_kind("cpu")


def test_a_profile_from_another_machine_is_refused_by_kind_not_by_message():
    with pytest.raises(ShapeMismatchError, match="shape does not fit"):
        resolve(str(EIGHT_NODES), None)
    # A caller that can live with it (validate-like) sees the same problems, typed.
    resolved = resolve(str(EIGHT_NODES), None, fatal=frozenset())
    assert {problem.kind for problem in resolved.problems} >= {"shape"}


def test_serve_refuses_a_profile_whose_shape_this_machine_cannot_bind_with_exit_5(tiny_checkpoint):
    done = subprocess.run(
        [sys.executable, "-m", "omni_cpu.cli", "serve", "--model", str(tiny_checkpoint),
         "--deploy-profile", str(EIGHT_NODES), "--dry-run"],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert done.returncode == 5
    assert "shape does not fit" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def _planned_here(tmp_path: Path) -> Path:
    path = tmp_path / "here.yaml"
    save_profile(plan_profile(read_facts("/"), footprint_for_model("0.6b")), path)
    return path


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to take one away")
def test_run_on_one_cpu_of_a_profile_planned_here_refuses_naming_the_missing_core(
    tmp_path, tiny_checkpoint
):
    path = _planned_here(tmp_path)
    planned = load_profile(path)
    kept = max(os.sched_getaffinity(0))
    lost = sorted(planned.replicas[0].cpu_ids() - {kept})
    command = [sys.executable, "-m", "omni_cpu.cli", "run", "--model", str(tiny_checkpoint),
               "--text", "hi", "--max-frames", "4", "--out", str(tmp_path / "a.wav"),
               "--deploy-profile", str(path), "--dry-run"]  # fmt: skip

    def one_cpu() -> None:
        os.sched_setaffinity(0, {kept})

    done = subprocess.run(
        command, capture_output=True, text=True, cwd=REPO, timeout=120, preexec_fn=one_cpu
    )
    assert done.returncode == 5, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "shape does not fit" in lines[0]
    assert f"CPU {lost[0]} " in lines[0] or f"CPUs {lost[0]}" in lines[0]
    forced = subprocess.run(
        [*command, "--force"], capture_output=True, text=True, cwd=REPO, timeout=120,
        preexec_fn=one_cpu,
    )  # fmt: skip
    assert forced.returncode == 0, forced.stderr
    assert "shape does not fit" in forced.stdout + forced.stderr  # the reason, printed


def test_a_profile_planned_here_binds_as_planned_through_resolve(tmp_path):
    path = _planned_here(tmp_path)
    resolved = resolve(str(path), None)
    assert resolved.binding is not None and not resolved.binding.relocated
    assert resolved.profile.replicas == load_profile(path).replicas


def test_per_stage_dtype_reaches_the_written_deploy_config(tiny_checkpoint, tmp_path):
    options = PlanOptions(dtype="float32", code2wav_dtype="bfloat16")
    profile = plan_profile(read_facts("/"), footprint_for_model("0.6b"), options)
    save_profile(profile, tmp_path / "deploy.yaml")
    plan = make_launch_plan(str(tiny_checkpoint), str(tmp_path / "deploy.yaml"))
    written = yaml.safe_load(plan.write_deploy_config(tmp_path).read_text())
    assert [(s["stage_id"], s["dtype"]) for s in written["stages"]] == [
        (0, "float32"),
        (1, "bfloat16"),
    ]


def _over_memory_profile(tmp_path: Path) -> Path:
    """A profile for this machine whose talker asks for a petabyte of KV cache."""
    profile = plan_profile(read_facts("/"), footprint_for_model("0.6b"))
    path = tmp_path / "huge-kv.yaml"
    save_profile(with_talker(profile, kv_cache_memory_bytes=10**15), path)
    return path


def test_run_refuses_a_profile_that_cannot_fit_unless_forced(tiny_checkpoint, tmp_path):
    path = _over_memory_profile(tmp_path)
    with pytest.raises(ProfileMismatchError, match=r"needs .* GiB") as refused:
        make_launch_plan(str(tiny_checkpoint), str(path))
    assert "--force" in refused.value.one_line()
    plan = make_launch_plan(str(tiny_checkpoint), str(path), force=True)
    assert any("GiB" in problem for problem in plan.problems)  # still shown as a warning


def test_serve_refuses_a_profile_that_cannot_fit_in_one_line_unless_forced(
    tiny_checkpoint, tmp_path
):
    path = _over_memory_profile(tmp_path)
    command = [sys.executable, "-m", "omni_cpu.cli", "serve", "--model", str(tiny_checkpoint),
               "--deploy-profile", str(path), "--dry-run"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 1, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "--force" in done.stderr
    forced = subprocess.run(
        [*command, "--force"], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert forced.returncode == 0, forced.stderr


@pytest.mark.skipif(
    find_library(INTEL_OPENMP) is None, reason="Intel OpenMP (libiomp5) is not installed"
)
def test_serve_runs_with_the_preloads_found_in_this_runtime(tiny_checkpoint, tmp_path):
    path = _planned_here(tmp_path)
    assert "intel-openmp" in load_profile(path).preload
    assert "libiomp5" not in path.read_text()  # named, not a path
    done = subprocess.run(
        [sys.executable, "-m", "omni_cpu.cli", "serve", "--model", str(tiny_checkpoint),
         "--deploy-profile", str(path), "--dry-run"],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    found = find_library(INTEL_OPENMP)
    # The server itself (so it can fork its stages) and each stage's environment.
    assert f"LD_PRELOAD={found}" in done.stdout
    assert done.stdout.count(f"LD_PRELOAD: {found}") == 2


def test_a_profile_naming_a_cpu_this_machine_lacks_relocates_onto_its_own(tmp_path):
    profile = plan_profile(read_facts("/"), footprint_for_model("0.6b"))
    talker_cores = len(profile.replicas[0].stage(0).cpu_ids())
    first = max(os.cpu_count() or 1, 4095) + 1
    moved = with_talker(profile, cpus=f"{first}-{first + talker_cores - 1}")
    save_profile(moved, tmp_path / "elsewhere.yaml")
    resolved = resolve(str(tmp_path / "elsewhere.yaml"), None)
    assert resolved.binding is not None and resolved.binding.relocated
    bound = resolved.profile.replicas[0]
    assert len(bound.stage(0).cpu_ids()) == talker_cores
    assert bound.cpu_ids() <= set(os.sched_getaffinity(0))
    assert not resolved.of_kind("cpu", "shape", "overlap")
