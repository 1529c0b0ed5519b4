"""The planner is pure: its rule modules import nothing that reads the live machine.

omni_cpu/plan/__init__.py and docs/planning.md name the three modules of the planner that
read (the machine's facts, the live machine and a profile file, a model's config files);
every other module of omni_cpu.plan must reach none of them, nor any reader of
omni_cpu.hardware, through any chain of imports (lazy ones too): a dump then plans as the
live machine does.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_architecture import MODULES, imports_of, room_of

# The planner's modules that read, and what each reads.
DOORS = {
    "omni_cpu.plan.machine": "a machine's facts (read_facts of a root)",
    "omni_cpu.plan.resolve": "the live machine and a profile file",
    "omni_cpu.plan.footprint": "a model's config files",
}
# omni_cpu.hardware's plain records: everything else in it reads a machine.
HARDWARE_RECORDS = {"omni_cpu.hardware.facts"}
PURE = sorted(
    module for module in MODULES if module.startswith("omni_cpu.plan.") and module not in DOORS
)


def reached(module: str) -> set[str]:
    """Every omni_cpu module `module` imports, directly or through others."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        for target, _line in imports_of(todo.pop()):
            # The edge into a package's face is where Python starts, not an import of ours.
            if (target == room_of(target) and target != "omni_cpu.plan") or target in seen:
                continue
            seen.add(target)
            todo.append(target)
    return seen


def readers(module: str) -> list[str]:
    """The machine readers `module` reaches (the doors allowed to read the model's files)."""
    return sorted(
        target
        for target in reached(module)
        if (target in DOORS and target != "omni_cpu.plan.footprint")
        or (target.startswith("omni_cpu.hardware.") and target not in HARDWARE_RECORDS)
    )


@pytest.mark.parametrize("module", PURE)
def test_a_planner_rule_module_reaches_no_machine_reader(module: str) -> None:
    assert readers(module) == []


def test_the_doors_are_the_modules_that_read_the_machine() -> None:
    assert readers("omni_cpu.plan.machine") != []
    assert readers("omni_cpu.plan.resolve") != []


def test_the_walk_sees_a_rule_module_that_reads_the_machine(tmp_path: Path) -> None:
    probe = tmp_path / "_pure_probe.py"
    probe.write_text("def facts():\n    from omni_cpu.hardware.probe import read_facts\n")
    MODULES["omni_cpu.plan._pure_probe"] = probe
    try:
        assert "omni_cpu.hardware.probe" in readers("omni_cpu.plan._pure_probe")
    finally:
        MODULES.pop("omni_cpu.plan._pure_probe", None)
