"""What the CPU is (cpuinfo's vendor_id, cpu family, model), read where x86 states it."""

from __future__ import annotations

from typing import Any

import pytest

from omni_cpu.hardware.cpuinfo import cpu_number, parse_cpuinfo
from omni_cpu.hardware.facts import Facts
from omni_cpu.hardware.probe import read_facts
from tests.helpers import sysroots
from tests.helpers.machines import machine


def _facts(dump_id: str, unpacked_dumps: Any) -> Facts:
    dump = next(d for d in sysroots.load_dumps() if d.id == dump_id)
    return read_facts(unpacked_dumps.root(dump))


def test_the_zen5_guest_reads_as_amd_family_26_model_2(unpacked_dumps: Any) -> None:
    facts = _facts("x86_64-zen5-kvm-2c", unpacked_dumps)
    assert (facts.vendor, facts.cpu_family, facts.cpu_model) == ("AuthenticAMD", 26, 2)


def test_an_arm_cpu_states_no_x86_family_or_model(unpacked_dumps: Any) -> None:
    facts = _facts("ul-arm-A510-A710-A715-X3", unpacked_dumps)
    assert (facts.cpu_family, facts.cpu_model) == (None, None)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("processor\t: 0\ncpu family\t: 25\nmodel\t\t: 17\n", (25, 17)),
        ("processor\t: 0\ncpu family\t: \nmodel\t\t: 0x11\n", (None, None)),  # odd: unread
        ("processor\t: 0\nmodel name\t: AMD EPYC\n", (None, None)),  # absent
        ("", (None, None)),
    ],
)
def test_family_and_model_are_read_forgivingly(text: str, expected: tuple) -> None:
    info = parse_cpuinfo(text)
    assert (cpu_number(info, "cpu family"), cpu_number(info, "model")) == expected


def test_facts_saved_without_family_and_model_still_load() -> None:
    saved = machine({0: [0, 1]}).to_dict()
    del saved["cpu_family"], saved["cpu_model"]
    again = Facts.from_dict(saved)
    assert (again.cpu_family, again.cpu_model) == (None, None)
