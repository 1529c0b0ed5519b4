"""One exception type per kind of user mistake, all in omni_cpu/errors.py.

The CLI maps each to its exit code (docs/configuration.md); one home means a reader finds
every kind, and every exit code, in one file.
"""

from __future__ import annotations

import ast
from pathlib import Path

import omni_cpu
from omni_cpu import errors

PACKAGE = Path(omni_cpu.__file__).parent
KINDS = {name for name, value in vars(errors).items() if isinstance(value, type)}


def error_classes_outside(path: Path) -> list[str]:
    """Classes in `path` that subclass one of errors.py's kinds."""

    def base_name(base: ast.expr) -> str:
        return base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")

    return [
        f"{path.name}:{node.lineno} {node.name}"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef) and any(base_name(b) in KINDS for b in node.bases)
    ]


def test_every_user_mistake_is_declared_in_errors_py() -> None:
    found = [
        line
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "errors.py" or path.parent != PACKAGE
        for line in error_classes_outside(path)
    ]
    assert found == []


def test_probes_exit_codes_are_errors_py_s() -> None:
    assert errors.MachineTooSmallError.exit_code == 5
    assert errors.SysrootError.exit_code == 6
    assert issubclass(errors.MachineTooSmallError, errors.PlanError)


def test_the_check_sees_a_kind_declared_elsewhere(tmp_path: Path) -> None:
    module = tmp_path / "placement.py"
    module.write_text(
        "from omni_cpu.errors import OmniCpuError\nclass PlanError(OmniCpuError):\n    pass\n"
    )
    assert error_classes_outside(module) == ["placement.py:2 PlanError"]
