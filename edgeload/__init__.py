"""edgeload: data loading for PyTorch on edge devices."""

# First: on a Python older than the floor (JetPack 4.6's 3.6) this raises a readable
# ImportError before any module that needs a newer Python is parsed.
from . import _compat  # noqa: F401

# isort: split
import importlib as _importlib
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from ._lazy import load_name as _load_name
from ._version import __version__
from .errors import (
    ArgumentError,
    ClosedError,
    EdgeloadError,
    MissingDependency,
    PlatformError,
    ProfileError,
    SourceError,
    StateError,
    WorkerError,
    WorkerTimeout,
)

# The rest of the public surface loads on first use (PEP 562): `import edgeload` and
# `edgeload --help` stay light, and a dataset-only program never loads the video path
# (about half the package: ~2 MiB and ~100 ms of imports on x86, several times that on
# a Pi).  Name -> the module that defines it.
_LAZY = {
    "autotune": ".tuning.tune",
    "load_state": ".checkpoint",
    "save_state": ".checkpoint",
    "DataLoader": ".dataset.loader",
    "get_worker_info": ".dataset.loader",
    "plan_for": ".platform.plan",
    "probe": ".platform.probe",
    "Batch": ".video",
    "FrameMeta": ".video",
    "StreamLoader": ".video",
    "VideoSource": ".video",
}

if _TYPE_CHECKING:
    from .checkpoint import load_state, save_state
    from .dataset.loader import DataLoader, get_worker_info
    from .platform.plan import plan_for
    from .platform.probe import probe
    from .tuning.tune import autotune
    from .video import Batch, FrameMeta, StreamLoader, VideoSource


# Modules reachable as attributes (`el.cuda.HostEngine`), as when the package loaded them
# all; `el.autotune` is the function, `el.tuning` the subpackage behind it.
_SUBMODULES = frozenset(
    (
        "checkpoint",
        "cli",
        "cuda",
        "dataset",
        "measure",
        "pipeline",
        "platform",
        "tuning",
        "video",
        "vocabulary",
    )
)


def __getattr__(name: str) -> _Any:
    if name in _SUBMODULES:
        return _importlib.import_module(f".{name}", __name__)  # binds it here as it loads
    return _load_name(__name__, _LAZY, globals(), name)


def __dir__() -> "list[str]":
    return sorted(set(globals()) | set(_LAZY) | _SUBMODULES)


__all__ = [
    "ArgumentError",
    "Batch",
    "ClosedError",
    "DataLoader",
    "EdgeloadError",
    "FrameMeta",
    "MissingDependency",
    "PlatformError",
    "ProfileError",
    "SourceError",
    "StateError",
    "StreamLoader",
    "VideoSource",
    "WorkerError",
    "WorkerTimeout",
    "__version__",
    "autotune",
    "get_worker_info",
    "load_state",
    "plan_for",
    "probe",
    "save_state",
]
