"""Lazy imports of the optional heavy dependencies (torch, OpenCV).

They are imported inside the functions that need them, so ``import edgeload`` and
``edgeload --help`` stay fast on a Pi, and a missing one is a clear
:class:`~edgeload.errors.MissingDependency` naming what to install.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import Any

from ._compat import dependency_problem
from .errors import MissingDependency

_HINTS = {
    "torch": (
        "PyTorch is not importable: on a Jetson install NVIDIA's JetPack wheel; elsewhere "
        "`pip install 'edgeload[torch]'` (or `pip install torch`)"
    ),
    "cv2": (
        "OpenCV is not importable: on a Jetson use JetPack's OpenCV (it has GStreamer); "
        "elsewhere `pip install 'edgeload[opencv]'` (opencv-python-headless)"
    ),
}


_checked: set[str] = set()


def _import(name: str) -> ModuleType:
    # The readers call this for every frame: a module already imported and checked is
    # one dict look-up (import_module costs a microsecond, about 1% of a small frame).
    module = sys.modules.get(name)
    if module is not None and name in _checked:
        return module
    try:
        module = importlib.import_module(name)
    except ImportError as exc:
        raise MissingDependency(f"{_HINTS[name]} ({exc})") from exc
    except Exception as exc:  # installed, but broken: e.g. built for another numpy
        raise MissingDependency(_broken(name, exc)) from exc
    if name not in _checked:
        # below the floor, edgeload would fail later with an AttributeError from deep inside
        problem = dependency_problem(name, str(getattr(module, "__version__", "0")))
        if problem is not None:
            raise MissingDependency(problem)
        _checked.add(name)
    return module


def _broken(name: str, exc: Exception) -> str:
    numpy = sys.modules.get("numpy")
    here = f" (numpy {numpy.__version__} here)" if numpy is not None else ""
    return (
        f"{name} is installed but its import failed ({type(exc).__name__}: {exc}). A "
        f"build made for another numpy{here} fails this way: on a board use its own "
        f"package; elsewhere install a release built for this numpy ({_HINTS[name]})"
    )


def require_torch() -> Any:
    """Import and return ``torch``, or raise MissingDependency saying what to install."""
    return _import("torch")


def require_cv2() -> Any:
    """Import and return ``cv2``, or raise MissingDependency saying what to install."""
    return _import("cv2")


def has_module(name: str) -> bool:
    """Whether ``name`` imports, without raising."""
    try:
        importlib.import_module(name)
    except Exception:  # missing, or installed but broken (see _broken)
        return False
    return True
