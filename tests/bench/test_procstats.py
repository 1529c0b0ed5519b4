"""Bench's per-stage groups: a process counts for the stage whose bind list it carries."""

from __future__ import annotations

import os

from omni_cpu.bench.procstats import stage_groups
from omni_cpu.process.stage_processes import BIND_ENV
from tests.helpers.stages import stand_in


def test_stages_sharing_a_bind_list_are_one_group_under_a_joined_name():
    binds = {"0-1": ((0, "talker"), (1, "code2wav"))}
    with stand_in("EngineCore", {BIND_ENV: "0-1"}) as stage:
        groups = stage_groups([stage.pid, os.getpid()], binds)
    assert groups == {"talker+code2wav": [stage.pid]}
