"""Classes stay under about 150 lines (STYLE.md), split by concept when they grow.

A class's size is its ``class`` statement to its last line, read with ``ast``.  The
classes still over the limit are listed with their size today: a new one fails, and
so does a listed one that grows.  Take an entry out once its class fits: an entry
still listed after that does not fail (a split elsewhere must not break the suite),
but it lets its class grow back to the listed size.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "edgeload"

MAX_CLASS_LINES = 150

# Over the limit today ("module path:class" -> lines); each may shrink, none may grow.
OVER_THE_LIMIT: dict[str, int] = {}


def class_sizes(package: Path = PACKAGE) -> dict[str, int]:
    """Every class under ``package``, nested ones included: ``"path:Name" -> lines``."""
    sizes = {}
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                end = node.end_lineno if node.end_lineno is not None else node.lineno
                name = f"{path.relative_to(package).as_posix()}:{node.name}"
                sizes[name] = end - node.lineno + 1
    return sizes


def oversized(sizes: dict[str, int], allowed: dict[str, int]) -> list[str]:
    """What breaks the limit: classes over it and not listed, and listed ones that grew."""
    found = []
    for name, lines in sorted(sizes.items()):
        limit = allowed.get(name, MAX_CLASS_LINES)
        if lines > limit:
            found.append(f"{name}: {lines} lines (limit {limit})")
    return found


def test_no_class_is_over_the_limit_or_grew_past_its_listed_size():
    found = oversized(class_sizes(), OVER_THE_LIMIT)
    assert not found, (
        f"classes over {MAX_CLASS_LINES} lines: {found}; split each by concept "
        "(STYLE.md: one concept per module), do not raise the limits here"
    )


def test_the_check_sees_a_class_over_the_limit_and_one_that_grew(tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_CLASS_LINES))
    (tmp_path / "big.py").write_text(f"class Big:\n{body}", encoding="utf-8")
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "small.py").write_text("class Outer:\n    class Inner:\n        y = 1\n")
    sizes = class_sizes(tmp_path)
    assert sizes == {"big.py:Big": MAX_CLASS_LINES + 1, "sub/small.py:Outer": 3,
                     "sub/small.py:Inner": 2}  # fmt: skip
    assert oversized(sizes, {}) == [
        f"big.py:Big: {MAX_CLASS_LINES + 1} lines (limit {MAX_CLASS_LINES})"
    ]
    assert oversized(sizes, {"big.py:Big": MAX_CLASS_LINES + 1}) == []
    assert oversized(sizes, {"big.py:Big": MAX_CLASS_LINES - 10}) != []
