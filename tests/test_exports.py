"""The public surface: a sorted, complete ``__all__``, and a light import."""

from __future__ import annotations

import subprocess
import sys

import edgeload


def test_all_is_sorted_and_complete():
    names = edgeload.__all__
    assert names == sorted(names)
    public = {n for n in vars(edgeload) if not n.startswith("_") and not _is_module(n)}
    assert public == set(names) - {"__version__"}
    for name in names:
        assert getattr(edgeload, name) is not None


def _is_module(name: str) -> bool:
    return type(getattr(edgeload, name)).__name__ == "module"


def test_import_does_not_pull_torch_or_cv2():
    # `edgeload --help` must stay fast on a Pi: torch and cv2 load only when used.
    code = "import sys, edgeload; print(sorted(m for m in ('torch', 'cv2') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_every_error_is_an_edgeload_error_and_the_builtin_its_callers_catch():
    """``except TimeoutError`` / ``except ValueError`` keep working around edgeload calls."""
    assert issubclass(edgeload.WaitTimeout, TimeoutError)
    assert issubclass(edgeload.WorkerTimeout, TimeoutError)
    assert issubclass(edgeload.WorkerTimeout, RuntimeError)  # what torch raises
    assert issubclass(edgeload.WorkerDied, RuntimeError)
    assert issubclass(edgeload.ArgumentError, ValueError)
    assert issubclass(edgeload.ProfileError, ValueError)
    for name in edgeload.errors.__all__:
        assert issubclass(getattr(edgeload.errors, name), edgeload.EdgeloadError), name
