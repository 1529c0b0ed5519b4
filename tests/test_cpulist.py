"""The kernel CPU-list syntax: examples, and properties over random input."""

from __future__ import annotations

import contextlib
import re

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from omni_cpu.cpulist import format_cpu_list, parse_cpu_list
from omni_cpu.errors import CpuListError


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("0-5,48-53", (0, 1, 2, 3, 4, 5, 48, 49, 50, 51, 52, 53)),
        ("0-6:2", (0, 2, 4, 6)),
        ("3", (3,)),
        (" 1,0 ", (0, 1)),
        ("", ()),
    ],
)
def test_parse_examples(text, cpus):
    assert parse_cpu_list(text) == cpus


@pytest.mark.parametrize(
    ("cpus", "text"),
    [((0, 1, 2, 3, 4, 5, 48, 49, 50, 51, 52, 53), "0-5,48-53"), ((7, 1, 2), "1-2,7"), ((), "")],
)
def test_format_examples(cpus, text):
    assert format_cpu_list(cpus) == text


@pytest.mark.parametrize("text", ["a", "1-", "-1", "3-1", "1,,2", "0-4:0", "2:2", "1-3:x"])
def test_malformed_lists_raise_cpu_list_error(text):
    with pytest.raises(CpuListError):
        parse_cpu_list(text)


@given(st.sets(st.integers(min_value=0, max_value=4096), max_size=200))
def test_format_then_parse_round_trips(cpus):
    assert parse_cpu_list(format_cpu_list(cpus)) == tuple(sorted(cpus))


def small_numbers_only(text: str) -> bool:
    # "0-99999999999" is a valid list of 10^11 CPUs; building it is not the point here.
    return all(len(number) <= 5 for number in re.findall(r"\d+", text))


@given(st.text(alphabet="0123456789-,: x\n", max_size=40))
def test_garbage_raises_only_cpu_list_error(text):
    assume(small_numbers_only(text))
    try:
        cpus = parse_cpu_list(text)
    except CpuListError:
        return
    assert all(isinstance(cpu, int) and cpu >= 0 for cpu in cpus)


@given(st.text(max_size=40))
def test_any_text_raises_only_cpu_list_error(text):
    assume(small_numbers_only(text))
    with contextlib.suppress(CpuListError):
        parse_cpu_list(text)


def test_absurd_cpu_ids_are_refused_instead_of_expanded():
    with pytest.raises(CpuListError, match="beyond any machine"):
        parse_cpu_list("0-9999999999")
