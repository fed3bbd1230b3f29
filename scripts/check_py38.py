#!/usr/bin/env python3
"""Python 3.8 gate for what vermin cannot see: run-time typing syntax and 3.9/3.10 methods.

JetPack 5 ships Python 3.8 and no 3.8 interpreter is at hand in CI, so the check is static.
vermin (run beside this in scripts/test.sh) knows the standard library's new functions, but
it skips code it cannot type. This walks each module's syntax tree and reports, outside
annotations and ``if TYPE_CHECKING:`` blocks:

- ``X | Y`` where a side is a type (None, a builtin type, a subscripted generic), and any
  ``|`` in the classes of ``isinstance``/``issubclass`` (3.10);
- ``list[int]``, ``collections.abc.Mapping[...]``, ``os.PathLike[str]`` and the like (3.9),
  and ``np.ndarray[...]`` (numpy 1.22);
- the one-argument ``traceback.format_exception(exc)`` (3.10);
- methods vermin cannot tie to a type: ``.is_relative_to``, ``.removeprefix``, ... (3.9+);
- ``numpy.typing`` imported at run time (numpy 1.20; JetPack 5 has 1.17);
- annotations with ``|`` or builtin generics in a module without
  ``from __future__ import annotations``.

Usage: check_py38.py PATH... (directories are walked for *.py); exit 1 on any finding.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

BUILTIN_GENERICS = {"list", "dict", "tuple", "set", "frozenset", "type"}
# classes that became subscriptable in 3.9 (numpy's ndarray and dtype in numpy 1.22)
LATE_GENERICS = {
    "PathLike", "Queue", "SimpleQueue", "Pattern", "Match", "deque", "defaultdict",
    "OrderedDict", "Counter", "ChainMap", "ndarray", "dtype", "Future", "ref", "WeakSet",
    "WeakKeyDictionary", "WeakValueDictionary", "partial",
}  # fmt: skip
BUILTIN_TYPES = BUILTIN_GENERICS | {"int", "float", "str", "bytes", "bool", "object", "memoryview"}
NEW_METHODS = {
    "is_relative_to": "3.9",
    "removeprefix": "3.9",
    "removesuffix": "3.9",
    "with_stem": "3.9",
    "bit_count": "3.10",
}
ONE_ARG_TRACEBACK = {"format_exception", "print_exception"}


class _Checker(ast.NodeVisitor):
    def __init__(self, tree: ast.Module) -> None:
        self.findings: list[tuple[int, str]] = []
        self.abc_names: set[str] = set()
        self.future = any(
            isinstance(n, ast.ImportFrom)
            and n.module == "__future__"
            and any(a.name == "annotations" for a in n.names)
            for n in tree.body
        )
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "collections.abc":
                self.abc_names.update(a.asname or a.name for a in node.names)

    def report(self, node: ast.AST, text: str) -> None:
        self.findings.append((getattr(node, "lineno", 0), text))

    # annotations: skipped with the __future__ import, checked without it
    def _annotation(self, node: ast.expr | None) -> None:
        if node is None or self.future:
            return
        for sub in ast.walk(node):
            if isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.BitOr):
                self.report(sub, "`X | Y` annotation without `from __future__ import annotations`")
            elif isinstance(sub, ast.Subscript) and self._generic(sub.value):
                self.report(sub, "builtin generic annotation without the __future__ import")

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        args = node.args
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if arg is not None:
                self._annotation(arg.annotation)
        self._annotation(node.returns)
        for child in [*node.decorator_list, *args.defaults, *args.kw_defaults]:
            if child is not None:
                self.visit(child)
        for stmt in node.body:
            self.visit(stmt)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._annotation(node.annotation)
        if node.value is not None:
            self.visit(node.value)

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
        if name != "TYPE_CHECKING":
            self.visit(test)
            for stmt in node.body:
                self.visit(stmt)
        for stmt in node.orelse:
            self.visit(stmt)

    def visit_Import(self, node: ast.Import) -> None:
        if any(a.name == "numpy.typing" for a in node.names):
            self.report(
                node, "numpy.typing imported at run time (numpy 1.20; keep it under TYPE_CHECKING)"
            )

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module == "numpy.typing" or (
            node.module == "numpy" and any(a.name == "typing" for a in node.names)
        ):
            self.report(
                node, "numpy.typing imported at run time (numpy 1.20; keep it under TYPE_CHECKING)"
            )

    # run-time expressions
    def _generic(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Name):
            return node.id in BUILTIN_GENERICS | LATE_GENERICS or node.id in self.abc_names
        if not isinstance(node, ast.Attribute):
            return False
        return node.attr in LATE_GENERICS or getattr(node.value, "attr", "") == "abc"

    def _typeish(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Constant) and node.value is None:
            return True
        if isinstance(node, ast.Name) and node.id in BUILTIN_TYPES:
            return True
        return isinstance(node, ast.Subscript)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if self._generic(node.value):
            self.report(node, "subscripted builtin or collections.abc generic at run time (3.9)")
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.BitOr) and (
            self._typeish(node.left) or self._typeish(node.right)
        ):
            self.report(node, "`X | Y` of types at run time (3.10)")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        classes = node.args[1] if len(node.args) == 2 else ast.Tuple(elts=[])
        union = any(isinstance(n, ast.BinOp) for n in ast.walk(classes))
        if name in ("isinstance", "issubclass") and union:
            self.report(node, f"`X | Y` in {name}() (3.10): pass a tuple")
        one_arg = len(node.args) == 1 and not node.keywords
        owner = getattr(func, "value", None)
        if name in ONE_ARG_TRACEBACK and one_arg and getattr(owner, "id", "") == "traceback":
            self.report(node, f"one-argument traceback.{name}(exc) (3.10)")
        if isinstance(func, ast.Attribute) and func.attr in NEW_METHODS:
            self.report(node, f".{func.attr}() ({NEW_METHODS[func.attr]})")
        self.generic_visit(node)


def check_file(path: Path) -> list[str]:
    """The findings for one file, as ``path:line: text`` lines."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    checker = _Checker(tree)
    checker.visit(tree)
    return [f"{path}:{line}: {text}" for line, text in sorted(checker.findings)]


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    files: list[Path] = []
    for arg in argv:
        root = Path(arg)
        files.extend(sorted(root.rglob("*.py")) if root.is_dir() else [root])
    findings = [line for path in files for line in check_file(path)]
    for line in findings:
        print(line)
    if findings:
        print(
            f"check_py38: {len(findings)} construct(s) that Python 3.8 cannot run", file=sys.stderr
        )
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
