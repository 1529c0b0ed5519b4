"""`validate --sysroot` shows how a profile binds on another machine's view; old profiles
upgrade without losing a reviewed value."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
import yaml

from omni_cpu.cpulist import format_cpu_list, parse_cpu_list
from omni_cpu.hardware.probe import read_facts
from omni_cpu.plan import footprint_for_model, plan_profile
from omni_cpu.profile import dump_profile, load_profile, save_profile
from omni_cpu.profile.model import PROFILE_SCHEMA_VERSION
from tests.helpers.cli import omni_cpu
from tests.helpers.machines import FakeMachine

HERE = Path(__file__).parent
REPO = HERE.parents[1]
OLD_PROFILES = sorted(HERE.glob("v[1234]-*.yaml"))
EXAMPLES = sorted((REPO / "profiles").glob("*.yaml"))
GIB_KIB = 1024 * 1024


def box(root: Path, cpus: int, cpuset: str | None = None) -> Path:
    """A one-node machine of `cpus` CPUs (64 GiB), in a pod's cgroup when `cpuset` is given."""
    machine = FakeMachine(root).cpus(online=list(range(cpus)))
    machine.node(0, f"0-{cpus - 1}", memory_kib=64 * GIB_KIB).meminfo(64 * GIB_KIB, 60 * GIB_KIB)
    if cpuset is not None:
        machine.cgroup2("/kubepods/pod1/ctr")
        machine.write("/sys/fs/cgroup/kubepods/pod1/ctr/cpuset.cpus.effective", cpuset)
    return root


@pytest.fixture
def planned_on_four(tmp_path: Path) -> Path:
    """A profile planned on a 4-CPU box's dump."""
    facts = read_facts(box(tmp_path / "planned", 4))
    path = tmp_path / "deploy.yaml"
    save_profile(plan_profile(facts, footprint_for_model("0.6b")), path)
    return path


def test_validate_against_a_pod_s_view_prints_the_binding_and_exits_0(planned_on_four, tmp_path):
    pod = box(tmp_path / "pod", 16, cpuset="9-12")
    done = omni_cpu("validate", str(planned_on_four), "--sysroot", str(pod))
    assert done.returncode == 0, done.stderr
    bindings = re.findall(r"replica 0 (\w+): planned (\S+) → here (\S+)", done.stdout)
    assert [name for name, _, _ in bindings] == ["talker", "code2wav"]
    assert all(set(here.replace("-", ",").split(",")) <= {"9", "10", "11", "12"}
               for _, _, here in bindings)  # fmt: skip
    assert "bound onto other CPUs" in done.stdout
    as_json = json.loads(omni_cpu("validate", str(planned_on_four), "--sysroot", str(pod),
                                  "--json").stdout)  # fmt: skip
    assert as_json["ok"] and as_json["relocated"]
    assert [move["who"] for move in as_json["binding"]] == ["talker", "code2wav"]


def test_validate_against_a_view_too_small_for_the_shape_exits_5_in_one_line(
    planned_on_four, tmp_path
):
    pod = box(tmp_path / "pod", 16, cpuset="9")
    done = omni_cpu("validate", str(planned_on_four), "--sysroot", str(pod))
    assert done.returncode == 5
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "shape does not fit" in lines[0] and "(CPUs 9)" in lines[0]


@pytest.mark.parametrize("old", OLD_PROFILES, ids=lambda path: path.name)
def test_an_old_profile_upgrades_keeping_every_reviewed_value(old: Path, tmp_path: Path):
    before = load_profile(old)
    target = tmp_path / old.name
    target.write_text(old.read_text())
    done = omni_cpu("profile", "upgrade", str(target), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "file": str(target), "from": before.schema_version, "to": PROFILE_SCHEMA_VERSION
    }  # fmt: skip
    after = load_profile(target)
    assert after.schema_version == PROFILE_SCHEMA_VERSION
    assert dump_profile(after) == dump_profile(before)
    assert after.replicas == before.replicas and after.streaming == before.streaming
    assert (after.env, after.preload, after.notes) == (before.env, before.preload, before.notes)
    assert not re.search(r"""(^|[\s"'=])/[A-Za-z]""", target.read_text(), re.MULTILINE)


@pytest.mark.parametrize("old", OLD_PROFILES, ids=lambda path: path.name)
def test_each_node_an_old_profile_wrote_is_the_one_it_loads_with(old: Path):
    written = yaml.safe_load(old.read_text())["omni_cpu"]
    loaded = load_profile(old)
    for raw, replica in zip(written["replicas"], loaded.replicas, strict=True):
        assert replica.numa_node == raw["numa_node"]
        for raw_stage, stage in zip(raw["stages"], replica.stages, strict=True):
            node = raw_stage.get("numa_node", raw["numa_node"])  # schema 1: the replica's
            memory = parse_cpu_list(raw_stage.get("memory_nodes", str(node)))
            assert (stage.numa_node, stage.memory_node_ids()) == (node, memory)


def test_schema_4_s_first_chunk_with_a_ramp_and_memory_elsewhere_upgrade_as_written(
    tmp_path: Path,
):
    old = HERE / "v4-xeon-x7550-4s-sparse-nodes.yaml"
    target = tmp_path / old.name
    target.write_text(old.read_text())
    assert omni_cpu("profile", "upgrade", str(target)).returncode == 0
    text = target.read_text()
    assert "initial_codec_chunk_frames" not in text and "codec_chunk_ramp: [1, 2, 5]" in text
    assert text.count("memory_nodes:") == 1 and 'memory_nodes: "2-3"' in text
    assert "numa_node:" not in text.split("# ---- vLLM-Omni deploy config")[0]
    upgraded = load_profile(target)
    assert upgraded.streaming.initial_codec_chunk_frames == 1
    assert upgraded.replicas[1].talker.memory_node_ids() == (2, 3)


def test_an_ld_preload_path_becomes_the_library_s_name():
    old = HERE / "v3-2core-int4-preload.yaml"
    assert "/libiomp5.so" in old.read_text()
    assert load_profile(old).preload == ("intel-openmp",)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.name)
def test_every_example_profile_loads_and_is_in_the_current_schema(example: Path):
    profile = load_profile(example)
    assert profile.schema_version == PROFILE_SCHEMA_VERSION
    assert dump_profile(profile) == example.read_text()


def test_an_unwritable_output_is_one_line_and_leaves_nothing(tmp_path: Path):
    old = HERE / "v3-zen5-kvm-2core.yaml"
    for target in (tmp_path, Path("/proc/deploy.yaml")):
        done = omni_cpu("profile", "upgrade", str(old), "--output", str(target))
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", [["validate"], ["serve", "--model", "CKPT", "--dry-run",
                                                    "--deploy-profile"]])  # fmt: skip
def test_a_negative_size_is_refused_by_validate_and_by_start(
    command, planned_on_four, tmp_path, tiny_checkpoint
):
    command = [str(tiny_checkpoint) if arg == "CKPT" else arg for arg in command]
    text = planned_on_four.read_text()
    bad = tmp_path / "negative.yaml"
    bad.write_text(re.sub(r"max_num_seqs: (\d+)", r"max_num_seqs: -\1", text, count=1))
    done = omni_cpu(*command, str(bad))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "max_num_seqs must be at least 1" in done.stderr


def test_diff_names_the_file_a_problem_is_in(planned_on_four, tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text(planned_on_four.read_text().replace("max_num_seqs:", "max_num_seq:", 1))
    for a, b in ((planned_on_four, broken), (broken, planned_on_four)):
        done = omni_cpu("diff", str(a), str(b))
        assert done.returncode == 2
        assert done.stderr.startswith(f"error: {broken} line ")
        assert len(done.stderr.strip().splitlines()) == 1


def test_a_dtype_problem_points_at_the_dtype_line_not_at_stages(planned_on_four, tmp_path):
    # Planned bf16 on a box with avx512_bf16; validated on one with AVX2 alone.
    no_bf16 = tmp_path / "no-bf16"
    FakeMachine(no_bf16).cpus(online=list(range(4)), flags="fpu lm avx avx2").node(
        0, "0-3", memory_kib=64 * GIB_KIB
    ).meminfo(64 * GIB_KIB, 60 * GIB_KIB)
    dtype_line = next(
        number
        for number, line in enumerate(planned_on_four.read_text().splitlines(), start=1)
        if line.split("#")[0].strip() == 'dtype: "bfloat16"'
    )
    done = omni_cpu("validate", str(planned_on_four), "--sysroot", str(no_bf16))
    assert done.returncode == 1
    assert f"problem: {planned_on_four} line {dtype_line}: stages[0].dtype bfloat16" in done.stderr


def test_a_validate_problem_names_the_file_and_the_line_of_its_field(planned_on_four, tmp_path):
    text = planned_on_four.read_text()
    over = tmp_path / "over.yaml"
    over.write_text(
        re.sub(
            r"\n    kv_cache_memory_bytes: \d+",
            "\n    kv_cache_memory_bytes: 10" + "0" * 14,
            text,
            count=1,
        )
    )
    # The field's own line (the one edited), not the `stages:` line above it.
    field_line = next(
        number
        for number, line in enumerate(over.read_text().splitlines(), start=1)
        if "kv_cache_memory_bytes: 10" + "0" * 14 in line
    )
    done = omni_cpu("validate", str(over), "--sysroot", str(box(tmp_path / "box", 4)))
    assert done.returncode == 1
    assert (
        f"problem: {over} line {field_line}: stages[0].kv_cache_memory_bytes: replica 0 needs"
        in done.stderr
    )


def test_a_stage_moved_to_another_node_s_cores_validates_with_no_other_edit(tmp_path: Path):
    dump = FakeMachine(tmp_path / "two-node").cpus(online=list(range(8)))
    dump.node(0, "0-3", memory_kib=32 * GIB_KIB).node(1, "4-7", memory_kib=32 * GIB_KIB)
    dump.meminfo(64 * GIB_KIB, 60 * GIB_KIB)
    planned = plan_profile(read_facts(dump.root), footprint_for_model("0.6b"))
    one = dataclasses.replace(planned, replicas=planned.replicas[:1])  # node 1's cores free
    talker = one.replicas[0].talker
    there = format_cpu_list(range(4, 4 + len(talker.cpu_ids())))
    path = tmp_path / "deploy.yaml"
    path.write_text(dump_profile(one).replace(f'cpus: "{talker.cpus}"', f'cpus: "{there}"', 1))
    done = omni_cpu("validate", str(path), "--sysroot", str(dump.root), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] and not report["relocated"]
    assert load_profile(path).replicas[0].talker.memory_node_ids() == (1,)
