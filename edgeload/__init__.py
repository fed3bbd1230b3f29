"""edgeload: data loading for PyTorch on edge devices."""

# First: on a Python older than the floor (JetPack 4.6's 3.6) this raises a readable
# ImportError before any module that needs a newer Python is parsed.
from . import _floor  # noqa: F401
from ._version import __version__
from .autotune.tune import DatasetWorkload, TuneResult, VideoWorkload, autotune
from .checkpoint import load_state, save_state
from .cuda.status import CudaDevice, CudaStatus, check_memory_mode, cuda_device, cuda_status
from .cuda.transfer import DeviceCopier
from .cuda.zero_copy import as_cuda_tensor
from .dataset.loader import DataLoader, get_worker_info
from .errors import (
    ArgumentError,
    ClosedError,
    EdgeloadError,
    MissingDependency,
    PlatformError,
    ProfileError,
    SourceError,
    WaitTimeout,
    WorkerDied,
    WorkerError,
    WorkerTimeout,
)
from .pipeline.prefetch import Prefetcher
from .pipeline.slots import SlotPool
from .pipeline.workers import WorkerPool
from .platform.plan import Plan, Threads, plan_for
from .platform.probe import Platform, probe
from .platform.profile import Profile, load_profile
from .video import Batch, FrameMeta, SourceState, StreamLoader, VideoSource

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
