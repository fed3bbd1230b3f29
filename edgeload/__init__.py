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
    WaitTimeout,
    WorkerDied,
    WorkerError,
    WorkerTimeout,
)

# The rest of the public surface loads on first use (PEP 562): `import edgeload` and
# `edgeload --help` stay light, and a dataset-only program never loads the video path
# (about half the package: ~2 MiB and ~100 ms of imports on x86, several times that on
# a Pi).  Name -> the module that defines it.
_LAZY = {
    "DatasetWorkload": ".tuning.tune",
    "TuneResult": ".tuning.tune",
    "VideoWorkload": ".tuning.tune",
    "autotune": ".tuning.tune",
    "load_state": ".checkpoint",
    "save_state": ".checkpoint",
    "CudaDevice": ".cuda.status",
    "CudaStatus": ".cuda.status",
    "check_memory_mode": ".cuda.status",
    "cuda_device": ".cuda.status",
    "cuda_status": ".cuda.status",
    "DeviceCopier": ".cuda.transfer",
    "as_cuda_tensor": ".cuda.memory",
    "DataLoader": ".dataset.loader",
    "get_worker_info": ".dataset.loader",
    "Prefetcher": ".pipeline.prefetch",
    "SlotPool": ".pipeline.slots",
    "WorkerPool": ".pipeline.workers",
    "Plan": ".platform.plan",
    "Threads": ".platform.plan",
    "plan_for": ".platform.plan",
    "Platform": ".platform.probe",
    "probe": ".platform.probe",
    "Profile": ".platform.profile",
    "load_profile": ".platform.profile",
    "Batch": ".video",
    "FrameMeta": ".video",
    "SourceState": ".video",
    "StreamLoader": ".video",
    "VideoSource": ".video",
}

if _TYPE_CHECKING:
    from .checkpoint import load_state, save_state
    from .cuda.memory import as_cuda_tensor
    from .cuda.status import CudaDevice, CudaStatus, check_memory_mode, cuda_device, cuda_status
    from .cuda.transfer import DeviceCopier
    from .dataset.loader import DataLoader, get_worker_info
    from .pipeline.prefetch import Prefetcher
    from .pipeline.slots import SlotPool
    from .pipeline.workers import WorkerPool
    from .platform.plan import Plan, Threads, plan_for
    from .platform.probe import Platform, probe
    from .platform.profile import Profile, load_profile
    from .tuning.tune import DatasetWorkload, TuneResult, VideoWorkload, autotune
    from .video import Batch, FrameMeta, SourceState, StreamLoader, VideoSource


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
    "CudaDevice",
    "CudaStatus",
    "DataLoader",
    "DatasetWorkload",
    "DeviceCopier",
    "EdgeloadError",
    "FrameMeta",
    "MissingDependency",
    "Plan",
    "Platform",
    "PlatformError",
    "Prefetcher",
    "Profile",
    "ProfileError",
    "SlotPool",
    "SourceError",
    "SourceState",
    "StateError",
    "StreamLoader",
    "Threads",
    "TuneResult",
    "VideoSource",
    "VideoWorkload",
    "WaitTimeout",
    "WorkerDied",
    "WorkerError",
    "WorkerPool",
    "WorkerTimeout",
    "__version__",
    "as_cuda_tensor",
    "autotune",
    "check_memory_mode",
    "cuda_device",
    "cuda_status",
    "get_worker_info",
    "load_profile",
    "load_state",
    "plan_for",
    "probe",
    "save_state",
]
