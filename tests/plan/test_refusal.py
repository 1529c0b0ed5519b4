"""A refusal states what the model needs and what the machine gives at the precision
that shows the gap, and what would fit instead."""

from __future__ import annotations

import re

import pytest

from omni_cpu.plan import MachineTooSmallError, footprint_for_model, plan_profile
from omni_cpu.plan.placement import gib_pair, replica_need_bytes
from tests.helpers.machines import GIB, machine

FOOTPRINT = footprint_for_model("0.6b")
MIB = 1 << 20


def _sizes(line: str) -> list[str]:
    return re.findall(r"about ([\d.]+ [GM]iB) for one replica .* gives it ([\d.]+ [GM]iB)", line)[0]


def _refusal_with_room(room: int) -> str:
    need = replica_need_bytes(FOOTPRINT, "bfloat16")
    # Under 10 GiB the safety margin is 1 GiB: the budget is the node's memory less 1 GiB.
    facts = machine({0: [0, 1, 2, 3]}, memory_per_node=need - room + GIB)
    with pytest.raises(MachineTooSmallError) as refused:
        plan_profile(facts, FOOTPRINT)
    return refused.value.one_line()


def test_a_gap_hidden_by_one_decimal_is_shown_with_more(tmp_path):
    need_text, have_text = _sizes(_refusal_with_room(20 * MIB))
    assert need_text != have_text


def test_a_wide_gap_keeps_one_decimal(tmp_path):
    need_text, have_text = _sizes(_refusal_with_room(2 * GIB))
    assert re.fullmatch(r"\d+\.\d GiB", need_text) and re.fullmatch(r"\d+\.\d GiB", have_text)


def test_a_refusal_says_what_would_fit():
    line = _refusal_with_room(300 * MIB)
    assert "would fit: --weights int8" in line


def test_sizes_are_told_apart_at_the_fewest_decimals():
    assert gib_pair(7 * GIB, 3 * GIB) == ("7.0 GiB", "3.0 GiB")
    assert gib_pair(7 * GIB, 7 * GIB - 40 * MIB) == ("7.00 GiB", "6.96 GiB")
    assert gib_pair(7 * GIB, 7 * GIB - 2 * MIB) == ("7.000 GiB", "6.998 GiB")
    assert gib_pair(7 * GIB, 7 * GIB - 1024) == (f"{7 * GIB} bytes", f"{7 * GIB - 1024} bytes")
    assert gib_pair(5 * GIB, 5 * GIB) == ("5.0 GiB", "5.0 GiB")
