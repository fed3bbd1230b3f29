"""The package's shape: imports flow one way along the data path, and never in a circle.

Read from the source with ``ast`` (nothing is imported), so a new upward import or a
cycle fails here before it fails as a half-initialised module on a user's board.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "edgeload"

# Who may import whom: a module may import its own subpackage and anything of a lower
# rank, never a sibling of the same rank (dataset and video know nothing of each other).
RANK = {
    "errors": 0,
    "_version": 0,
    "vocabulary": 0,
    "_compat": 0,  # the oldest Python, torch and OpenCV; stand-ins for what 3.9/3.10 added
    "_lazy": 0,  # names a package loads on first use
    "_args": 1,  # the argument checks every public constructor uses
    "_deps": 1,
    "checkpoint": 1,
    "measure": 1,
    "platform": 2,
    "cuda": 3,
    "pipeline": 4,
    "dataset": 5,
    "video": 5,
    "tuning": 6,
    "cli": 7,
    "__main__": 8,
    "": 9,  # edgeload/__init__.py re-exports everything
}
# platform reads the device; it may name nothing of the data path but errors and the words.
PLATFORM_MAY_IMPORT = {"errors", "vocabulary", "_compat", "_args"}


def _modules(package: Path = PACKAGE) -> dict[str, tuple[Path, bool]]:
    found = {}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        found[".".join(parts)] = (path, is_package)
    return found


MODULES = _modules()


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
            skipped.update(id(inner) for inner in ast.walk(node))
    return skipped


def imports_of(
    name: str, modules: dict[str, tuple[Path, bool]] = MODULES, *, typing: bool = False
) -> set[str]:
    """Modules of edgeload that ``name`` imports at run time (anywhere in the file);
    with ``typing``, also those it names only for the type checker (``TYPE_CHECKING``)."""
    path, is_package = modules[name]
    tree = ast.parse(path.read_text())
    package = name if is_package else name.rpartition(".")[0]
    skipped = set() if typing else _type_checking_nodes(tree)
    targets: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            subs = [f"{module}.{alias.name}" for alias in node.names]
            hits = [sub for sub in subs if sub in modules]
            targets.update(hits or [module])
        elif isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
    found = set()
    for target in targets:
        if not target.startswith("edgeload"):
            continue
        parts = target.split(".")
        # importing a.b.c runs the __init__ of every package on the way (but edgeload's own)
        for end in range(2, len(parts) + 1):
            parent = ".".join(parts[:end])
            if parent in modules and parent != name and not name.startswith(parent + "."):
                found.add(parent)
    return found


def _area(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_module_has_a_rank():
    assert {_area(name) for name in MODULES} <= set(RANK)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_flow_down_the_data_path(name):
    area = _area(name)
    upward = sorted(
        target
        for target in imports_of(name)
        if _area(target) != area and RANK[_area(target)] >= RANK[area]
    )
    assert not upward, f"{name} imports {upward}: move the shared piece down a layer"
    if area == "platform":
        outside = sorted(
            t for t in imports_of(name) if _area(t) not in {"platform"} | PLATFORM_MAY_IMPORT
        )
        assert not outside, f"{name} imports {outside}; platform may use only errors and vocabulary"


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every back edge of a depth-first walk, as the cycle it closes."""
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name)
    return cycles


def test_no_import_cycles():
    cycles = find_cycles({name: imports_of(name) for name in MODULES})
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_no_cycles_even_through_type_checking_imports():
    # A cycle that only the type checker follows still means two modules know each
    # other's insides: give the shared type its own lower module instead.
    cycles = find_cycles({name: imports_of(name, typing=True) for name in MODULES})
    assert not cycles, "type-level import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_the_checks_see_a_planted_cycle_and_an_upward_import(tmp_path):
    fake = tmp_path / "edgeload"
    (fake / "pipeline").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "errors.py").write_text("from .pipeline import workers\n")
    (fake / "dataset.py").write_text("")
    (fake / "pipeline" / "__init__.py").write_text("")
    (fake / "pipeline" / "workers.py").write_text(
        "from typing import TYPE_CHECKING\nfrom ..errors import X\n"
        "if TYPE_CHECKING:\n    from ..dataset import y\n"
        "def f():\n    from .. import dataset\n"
    )
    modules = _modules(fake)
    graph = {name: imports_of(name, modules) for name in modules}
    # a lazy import inside a function counts; one under TYPE_CHECKING does not
    assert graph["edgeload.pipeline.workers"] == {"edgeload.errors", "edgeload.dataset"}
    assert find_cycles(graph) == [
        ["edgeload.errors", "edgeload.pipeline.workers", "edgeload.errors"]
    ]


def test_the_type_level_check_sees_a_cycle_only_type_checking_closes(tmp_path):
    fake = tmp_path / "edgeload"
    (fake / "dataset").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "dataset" / "__init__.py").write_text("")
    (fake / "dataset" / "loader.py").write_text("from ._epoch import EpochIterator\n")
    (fake / "dataset" / "_epoch.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .loader import DataLoader\n"
    )
    modules = _modules(fake)
    runtime = {name: imports_of(name, modules) for name in modules}
    typed = {name: imports_of(name, modules, typing=True) for name in modules}
    assert find_cycles(runtime) == []
    assert typed["edgeload.dataset._epoch"] == {"edgeload.dataset.loader"}
    assert find_cycles(typed) == [
        ["edgeload.dataset._epoch", "edgeload.dataset.loader", "edgeload.dataset._epoch"]
    ]
