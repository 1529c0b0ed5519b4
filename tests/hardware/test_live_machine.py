"""The probe on the machine running the tests (`root="/"`)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time

from omni_cpu.cpulist import format_cpu_list, parse_cpu_list
from omni_cpu.hardware import read_facts


def test_live_probe_reads_this_machine_with_its_affinity():
    started = time.perf_counter()
    facts = read_facts("/")
    elapsed = time.perf_counter() - started
    print(f"read_facts('/') took {elapsed * 1000:.1f} ms: {facts.online_cpus} {facts.isa}")
    assert facts.source == "live"
    assert facts.architecture == platform.machine()
    assert len(parse_cpu_list(facts.online_cpus)) == os.cpu_count()
    assert facts.limits.affinity_cpus == format_cpu_list(os.sched_getaffinity(0))
    assert facts.libnuma is not None


def test_live_probe_imports_neither_torch_nor_vllm():
    # A fresh interpreter: other tests in this session may import torch themselves.
    script = (
        "import sys; from omni_cpu.hardware import read_facts; read_facts('/'); "
        "print(sorted({'torch', 'vllm', 'vllm_omni'} & set(sys.modules)))"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
