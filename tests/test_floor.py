"""Below the floor (Python 3.8, torch 1.11, OpenCV 4.5.1) edgeload says what is too old."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import cv2
import pytest
import torch

from edgeload import MissingDependency, _deps

# Internal: the floor checks are called with versions this machine does not have.
from edgeload._compat import check_python, dependency_problem, version_tuple

PACKAGE = Path(__file__).resolve().parents[1] / "edgeload"


def test_python_36_gets_a_sentence_naming_the_floor_and_what_to_do():
    with pytest.raises(ImportError) as caught:
        check_python((3, 6, 9, "final", 0))
    text = str(caught.value)
    assert "needs Python 3.8 or newer; this is Python 3.6.9" in text
    assert "JetPack 4.6" in text and "docs/platforms.md" in text
    check_python((3, 8, 10, "final", 0))  # the floor itself passes


def test_the_check_runs_before_anything_else_and_parses_on_python_36():
    init = ast.parse((PACKAGE / "__init__.py").read_text())
    first = next(n for n in init.body if isinstance(n, (ast.Import, ast.ImportFrom)))
    assert isinstance(first, ast.ImportFrom) and [a.name for a in first.names] == ["_compat"]
    for name in ("__init__.py", "_compat.py"):
        ast.parse((PACKAGE / name).read_text(), feature_version=(3, 6))


@pytest.mark.parametrize(
    ("name", "version", "ok"),
    [
        ("torch", "1.10.0a0+git36449ea", False),  # JetPack 4.6's newest
        ("torch", "1.11.0", True),
        ("torch", "2.1.2+cpu", True),
        ("cv2", "4.1.1", False),  # JetPack 4.6
        ("cv2", "4.5.1", True),
        ("cv2", "4.10.0", True),
    ],
)
def test_dependency_floor(name, version, ok):
    problem = dependency_problem(name, version)
    assert (problem is None) == ok
    if not ok:
        assert version in problem and "older than edgeload's floor" in problem
        assert "pip install" in problem


def test_version_tuple():
    assert version_tuple("1.10.0a0+git36449ea") == (1, 10, 0)
    assert version_tuple("4.5.1") == (4, 5, 1)


@pytest.mark.parametrize(("module", "old"), [(torch, "1.10.2"), (cv2, "4.1.1")])
def test_the_first_loader_call_names_a_too_old_torch_or_opencv(monkeypatch, module, old):
    name = module.__name__
    monkeypatch.setattr(module, "__version__", old)
    monkeypatch.setattr(_deps, "_checked", set())
    require = _deps.require_torch if name == "torch" else _deps.require_cv2
    with pytest.raises(MissingDependency, match=f"{old} is older than edgeload's floor"):
        require()


# What OpenCV 4.8's PyPI wheel does on numpy 1.21 (JetPack 6's): it is installed, and its
# import raises TypeError, not ImportError.
_BROKEN_CV2 = "raise TypeError(\"'numpy._DTypeMeta' object is not subscriptable\")\n"


def test_an_installed_cv2_whose_import_fails_is_a_missing_dependency_naming_the_cause(tmp_path):
    (tmp_path / "cv2.py").write_text(_BROKEN_CV2)
    code = (
        "import numpy, edgeload\n"
        "from edgeload import MissingDependency, _deps\n"
        "assert not _deps.has_module('cv2')\n"
        "try:\n    _deps.require_cv2()\n"
        "except MissingDependency as exc:\n    print(exc)\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{PACKAGE.parent}"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "cv2 is installed but its import failed (TypeError:" in text
    assert "_DTypeMeta" in text and "another numpy (numpy " in text
    assert "opencv-python-headless" in text
