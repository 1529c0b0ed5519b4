"""The small, forgiving parsers under the probe."""

from __future__ import annotations

import pytest

from omni_cpu.hardware.arch import architecture_from_cpuinfo
from omni_cpu.hardware.cpuinfo import parse_cpuinfo
from omni_cpu.hardware.facts import NumaNode
from omni_cpu.hardware.isa import read_isa
from omni_cpu.hardware.libnuma import _compare
from omni_cpu.hardware.numa import parse_meminfo
from omni_cpu.hardware.sysroot import parse_cpu_mask


@pytest.mark.parametrize(
    ("text", "cpus"),
    [("0000000f", (0, 1, 2, 3)), ("00000001,00000000", (32,)), ("0", ()), ("", ())],
)
def test_cpu_mask_parses_comma_grouped_hex(text, cpus):
    assert parse_cpu_mask(text) == cpus


def test_cpu_mask_garbage_is_none():
    assert parse_cpu_mask("zz") is None


def test_node_meminfo_lines_become_bytes():
    text = "Node 1 MemTotal:  2048 kB\nNode 1 MemFree:   1024 kB\nNode 1 HugePages_Total: 4\n"
    assert parse_meminfo(text) == {
        "MemTotal": 2048 * 1024,
        "MemFree": 1024 * 1024,
        "HugePages_Total": 4,
    }


def test_cpuinfo_keeps_old_arm_processor_name_apart_from_cpu_numbers():
    info = parse_cpuinfo(
        "Processor\t: ARMv7 Processor rev 4 (v7l)\nprocessor\t: 0\n\nprocessor: 1\n"
    )
    assert sorted(info.processors) == [0, 1]
    assert info.first("processor name") == "ARMv7 Processor rev 4 (v7l)"


@pytest.mark.parametrize(
    ("cpuinfo", "architecture"),
    [
        ("processor: 0\nvendor_id: GenuineIntel\nflags: fpu lm avx\n", "x86_64"),
        ("processor: 0\nvendor_id: GenuineIntel\nflags: fpu avx\n", "i686"),
        (
            "processor: 0\nFeatures: fp asimd\nCPU implementer: 0x41\nCPU architecture: 8\n",
            "aarch64",
        ),
        (
            "processor: 0\nFeatures: half neon\nCPU implementer: 0x41\nCPU architecture: 8\n",
            "armv8l",
        ),
        ("vendor_id: IBM/S390\nfeatures: esan3 zarch\n", "s390x"),
        ("processor: 0\ncpu: POWER9 (raw), altivec supported\nplatform: PowerNV\n", "ppc64le"),
        ("processor: 0\ncpu: POWER7 (architected)\nplatform: pSeries\n", "ppc64"),
        ("processor: 0\nhart: 0\nisa: rv64imafdcv\n", "riscv64"),
        ("", "unknown"),
    ],
)
def test_architecture_is_derived_from_cpuinfo_shape(cpuinfo, architecture):
    assert architecture_from_cpuinfo(parse_cpuinfo(cpuinfo)) == architecture


def test_isa_keeps_only_flags_every_cpu_has():
    info = parse_cpuinfo(
        "processor: 0\nflags: avx2 avx512f amx_bf16\n\nprocessor: 1\nflags: avx2 avx512f\n"
    )
    assert read_isa(info, "x86_64") == ["avx2", "avx512f"]


def test_aarch64_half_precision_adds_derived_fp16():
    info = parse_cpuinfo("processor: 0\nFeatures: fp asimd fphp asimdhp bf16\n")
    assert read_isa(info, "aarch64") == ["asimd", "asimdhp", "bf16", "fp", "fp16", "fphp"]


def test_libnuma_sizes_within_tolerance_agree_with_sysfs():
    nodes = [NumaNode(id=0, cpus="0-1", memory_bytes=8 << 30)]
    assert _compare({0: (8 << 30) - (1 << 20)}, nodes) == (True, None)


def test_libnuma_sizes_far_from_sysfs_disagree():
    nodes = [NumaNode(id=0, cpus="0-1", memory_bytes=8 << 30)]
    agrees, note = _compare({0: 4 << 30}, nodes)
    assert agrees is False
    assert "node 0" in note
