"""The probe on the machine running the tests (`root="/"`)."""

from __future__ import annotations

import os
import platform
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
