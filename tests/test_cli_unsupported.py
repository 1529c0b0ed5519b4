"""`probe` on a machine the runtime cannot serve: said in the table and the profile, exit 5
unless --force; `doctor` judges the ISA by the same list."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from omni_cpu.plan.support import RUNTIME_ISA, runtime_refusal
from omni_cpu.runtime.doctor import FAIL, OK, check_isa
from tests.helpers import sysroots
from tests.helpers.cli import omni_cpu
from tests.helpers.machines import FakeMachine

GIB_KIB = 1 << 20
ARMV7_CPUINFO = (
    "processor\t: {cpu}\nmodel name\t: ARMv7 Processor rev 4 (v7l)\n"
    "Features\t: half thumb fastmult vfp edsp neon vfpv3 tls vfpv4 idiva idivt\n"
    "CPU implementer\t: 0x41\nCPU architecture: 7\nCPU part\t: 0xc07\n"
)


def small_machine(root: Path, flags: str = "fpu lm avx avx2") -> FakeMachine:
    machine = FakeMachine(root).cpus(online=[0, 1, 2, 3], flags=flags)
    machine.node(0, "0-3", memory_kib=32 * GIB_KIB).meminfo(32 * GIB_KIB, 32 * GIB_KIB)
    return machine


def x86_without_avx2(root: Path) -> Path:
    return small_machine(root, flags="fpu lm sse4_2 avx").root


def armv7(root: Path) -> Path:
    machine = small_machine(root)
    machine.write("/proc/cpuinfo", "\n".join(ARMV7_CPUINFO.format(cpu=c) for c in range(4)))
    return machine.write("/proc/sys/kernel/arch", "armv7l").root


@pytest.mark.parametrize(("build", "reason"), [(x86_without_avx2, "AVX2"), (armv7, "armv7l")])
def test_probe_refuses_a_machine_the_runtime_cannot_serve(tmp_path, build, reason):
    output = tmp_path / "deploy.yaml"
    done = omni_cpu("probe", "--sysroot", str(build(tmp_path / "root")), "-o", str(output))
    assert done.returncode == 5, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: the runtime cannot serve this machine") and reason in line
    assert "--force" in line
    assert "cannot serve it" in done.stdout  # the facts table's runtime row
    assert "note: the runtime cannot serve this machine" in done.stdout.replace("\n", " ")
    assert not output.exists()


def test_probe_json_carries_the_refusal_and_the_profile_note(tmp_path):
    done = omni_cpu("probe", "--sysroot", str(armv7(tmp_path / "root")), "--json")
    assert done.returncode == 5
    data = json.loads(done.stdout)
    assert "armv7l" in data["error"]
    assert any("cannot serve this machine" in note for note in data["profile"]["notes"])


def test_force_plans_and_writes_it_with_the_note_kept(tmp_path):
    output = tmp_path / "deploy.yaml"
    root = x86_without_avx2(tmp_path / "root")
    done = omni_cpu("probe", "--sysroot", str(root), "--force", "-o", str(output))
    assert done.returncode == 0, done.stderr
    assert "the runtime cannot serve this machine" in output.read_text()


def test_a_machine_the_runtime_serves_says_so_and_exits_0(tmp_path):
    done = omni_cpu("probe", "--sysroot", str(small_machine(tmp_path / "root").root))
    assert done.returncode == 0, done.stderr
    assert "can serve it" in done.stdout and "cannot serve" not in done.stdout


@pytest.mark.parametrize(
    ("architecture", "isa"),
    [("x86_64", ["sse4_2", "avx"]), ("armv7l", ["neon"]), ("aarch64", []), ("riscv64", ["v"])],
)
def test_doctor_fails_exactly_the_machines_probe_refuses(architecture, isa):
    refusal = runtime_refusal(architecture, isa)
    assert refusal is not None
    check = check_isa(isa, architecture)
    assert check.status == FAIL and check.detail == refusal


@pytest.mark.parametrize("architecture", sorted(RUNTIME_ISA))
def test_every_runtime_architecture_with_its_isa_passes_both(architecture):
    flags = list(RUNTIME_ISA[architecture][0])
    assert runtime_refusal(architecture, flags) is None
    assert check_isa(flags, architecture).status == OK


@pytest.mark.parametrize("dump_id", ["ul-armv7", "ul-x86_64-dell_e4310", "ul-s390-kvm"])
def test_real_dumps_of_unservable_machines_exit_5(unpacked_dumps, dump_id):
    dump = next(d for d in sysroots.load_dumps() if d.id == dump_id)
    done = omni_cpu("probe", "--sysroot", str(unpacked_dumps.root(dump)), "--json")
    assert done.returncode == 5, done.stderr
    assert "cannot serve this machine" in json.loads(done.stdout)["error"]


# -- validate and export k8s --sysroot judge the machine as probe does ---------------------


@pytest.fixture(scope="module")
def float32_profile(tmp_path_factory) -> Path:
    """A float32 profile planned on a 4-core AVX2 machine."""
    from omni_cpu.plan import footprint_for_model, plan_profile
    from omni_cpu.profile import dump_profile
    from tests.helpers.machines import machine

    profile = plan_profile(machine({0: [0, 1, 2, 3]}, isa=("avx2",)), footprint_for_model("0.6b"))
    assert {stage.dtype for r in profile.replicas for stage in r.stages} == {"float32"}
    path = tmp_path_factory.mktemp("profile") / "deploy.yaml"
    path.write_text(dump_profile(profile))
    return path


def _dump(tarball: str, folder: Path) -> Path:
    return sysroots.unpack(sysroots.SYSROOTS_DIR / tarball, folder)


@pytest.mark.parametrize(
    ("tarball", "reason"),
    [
        ("ppc64-POWER7.tar.gz", "ppc64"),
        ("s390-lpar.tar.gz", "s390x"),
        ("x86_64-dell_e4310.tar.gz", "x86_64 without AVX2"),
    ],
)
def test_validate_exits_5_where_probe_does(tmp_path, monkeypatch, float32_profile, tarball, reason):
    from tests.helpers.cli import exit_code

    root = _dump(tarball, tmp_path)
    assert exit_code(monkeypatch, "probe", "--sysroot", str(root)) == 5
    assert exit_code(monkeypatch, "validate", str(float32_profile), "--sysroot", str(root)) == 5
    done = omni_cpu("validate", str(float32_profile), "--sysroot", str(root), "--json")
    assert done.returncode == 5
    [problem] = json.loads(done.stdout)["problems"]
    assert "the runtime cannot serve this machine" in problem and reason in problem


def test_export_k8s_refuses_a_node_dump_the_runtime_cannot_serve(tmp_path, float32_profile):
    root = _dump("x86_64-dell_e4310.tar.gz", tmp_path)
    done = omni_cpu("export", "k8s", "--profile", str(float32_profile), "--sysroot", str(root))
    assert done.returncode == 5
    [line] = done.stderr.strip().splitlines()
    assert "AVX2" in line


def test_export_k8s_writes_no_path_of_the_exporting_machine(tmp_path, float32_profile):
    root = _dump("x86_64-zen5-kvm-2c.tar.gz", tmp_path / "dumps")
    done = omni_cpu("export", "k8s", "--profile", str(float32_profile), "--sysroot", str(root))
    assert done.returncode == 0, done.stderr
    assert "read from the node's dump" in done.stdout
    assert str(tmp_path) not in done.stdout and str(float32_profile.parent) not in done.stdout
