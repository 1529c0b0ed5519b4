"""The packages stand in floors: every import points down a floor, and none goes round.

ARCHITECTURE.md draws the same floors (a test below holds the two together). Every
import counts, at module level, inside a function (lazy) or under TYPE_CHECKING: a lazy
import is still an arrow, and a lazy circle is still a circle. A package new to the tree
fails the first test until it is given a floor.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import omni_cpu

ROOT = Path(omni_cpu.__file__).parent

# Bottom to top. A module may import its own package and anything on a lower floor.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("omni_cpu", "omni_cpu.errors", "omni_cpu.weight_formats"),
    ("omni_cpu.cpulist", "omni_cpu.envs", "omni_cpu.output", "omni_cpu.pins"),
    ("omni_cpu.hardware", "omni_cpu.checkpoint", "omni_cpu.profile"),
    ("omni_cpu.plan", "omni_cpu.speech"),
    ("omni_cpu.process",),
    ("omni_cpu.kernels",),
    ("omni_cpu.models",),
    ("omni_cpu.platform",),
    ("omni_cpu.launch", "omni_cpu.quality", "omni_cpu.runtime", "omni_cpu.export"),
    ("omni_cpu.api", "omni_cpu.serve", "omni_cpu.bench"),
    ("omni_cpu.cli",),
    ("omni_cpu.__main__",),
)
FLOOR_OF = {room: level for level, rooms in enumerate(FLOORS) for room in rooms}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def room_of(module: str) -> str:
    """The package (or top-level module) a module lives in: omni_cpu.plan.costs -> omni_cpu.plan."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else module


def imports_of(module: str) -> Iterator[tuple[str, int]]:
    """Every omni_cpu module `module` imports, with the line, wherever the import stands."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "omni_cpu":
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            if target.split(".")[0] != "omni_cpu":
                continue
            for alias in node.names:
                # `from omni_cpu.kernels import gemv` imports the module omni_cpu.kernels.gemv.
                submodule = f"{target}.{alias.name}"
                yield (submodule if submodule in MODULES else target), node.lineno


def test_every_room_has_a_floor() -> None:
    rooms = {room_of(module) for module in MODULES}
    assert sorted(rooms - set(FLOOR_OF)) == [], "give each new package a floor in FLOORS"
    assert sorted(set(FLOOR_OF) - rooms) == [], "FLOORS names a package that is gone"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_import_points_down(module: str) -> None:
    room = room_of(module)
    upward = [
        f"line {line}: {target} (floor {FLOOR_OF[room_of(target)]}, "
        f"{room} is on floor {FLOOR_OF[room]})"
        for target, line in imports_of(module)
        if room_of(target) != room and FLOOR_OF[room_of(target)] >= FLOOR_OF[room]
    ]
    assert upward == []


def test_no_module_imports_itself_round() -> None:
    graph = {module: {target for target, _ in imports_of(module)} - {module} for module in MODULES}
    # A package imports its own modules and they import their package's face: that edge
    # into __init__ is where Python starts, not a circle of our making.
    for module, targets in graph.items():
        graph[module] = {t for t in targets if not (t == room_of(module) and t != module)}
    circles = strongly_connected(graph)
    assert [sorted(circle) for circle in circles if len(circle) > 1] == []


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's strongly connected components (iterative-free: the graph is a few hundred nodes)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            found.append(component)

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_the_walk_sees_a_lazy_circle_and_an_upward_import(tmp_path: Path) -> None:
    # The checks above are only as good as this walk: a circle through a function-level
    # import, and an arrow from a low floor to a high one, must both be seen.
    graph = {"a": {"b"}, "b": {"a"}, "c": set()}
    assert {frozenset(c) for c in strongly_connected(graph) if len(c) > 1} == {
        frozenset({"a", "b"})
    }
    # The probe is read as if it stood in omni_cpu/plan/, from tmp_path: nothing is
    # written into the package, where another test worker could collect it.
    source = "def later():\n    from omni_cpu.cli import main\n"
    probe = tmp_path / "_walk_probe.py"
    probe.write_text(source)
    MODULES["omni_cpu.plan._walk_probe"] = probe
    try:
        assert list(imports_of("omni_cpu.plan._walk_probe")) == [("omni_cpu.cli", 2)]
        with pytest.raises(AssertionError):
            test_every_import_points_down("omni_cpu.plan._walk_probe")
    finally:
        MODULES.pop("omni_cpu.plan._walk_probe", None)


ARCHITECTURE = ROOT.parent / "ARCHITECTURE.md"
# A floor of the drawing: its number, then its rooms' short names up to the first rule.
DRAWN_FLOOR = re.compile(r"^\s*(\d+)\s{2}([a-z_ ]+?)\s*(?:[─│].*)?$")


def drawn_floors(text: str) -> dict[int, set[str]]:
    """The floors ARCHITECTURE.md's drawing (its first code block) shows: level -> rooms."""
    drawing = text.split("```", 2)[1]
    floors: dict[int, set[str]] = {}
    for line in drawing.splitlines():
        if match := DRAWN_FLOOR.match(line):
            names = match.group(2).split()
            floors[int(match.group(1))] = {
                name if name == "omni_cpu" else f"omni_cpu.{name}" for name in names
            }
    return floors


def test_architecture_md_draws_the_floors_this_test_walks() -> None:
    tested = {level: set(rooms) for level, rooms in enumerate(FLOORS)}
    assert drawn_floors(ARCHITECTURE.read_text()) == tested


def test_the_drawing_reader_reads_a_floor_with_its_notes() -> None:
    drawing = "```\n  9  serve     bench ─── the server │ bench\n        │  └─ a note\n```\n"
    assert drawn_floors(drawing) == {9: {"omni_cpu.serve", "omni_cpu.bench"}}
