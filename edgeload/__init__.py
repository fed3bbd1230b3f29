"""edgeload: data loading for PyTorch on edge devices."""

from ._version import __version__
from .autotune import DatasetWorkload, TuneResult, VideoWorkload, autotune
from .buffers import SlotPool
from .cuda_memory import as_cuda_tensor
from .errors import (
    ClosedError,
    EdgeloadError,
    MissingDependency,
    PlatformError,
    ProfileError,
    SourceError,
    WorkerError,
    WorkerTimeout,
)
from .gpu import CudaDevice, CudaStatus, check_memory_mode, cuda_device, cuda_status
from .loader import DataLoader, get_worker_info
from .plan import Plan, Threads, plan_for
from .prefetch import Prefetcher
from .probe import Platform, probe
from .profile import Profile, load_profile
from .state import load_state, save_state
from .transfer import DeviceCopier
from .video import Batch, FrameMeta, SourceState, StreamLoader, VideoSource
from .workers import WorkerPool

__all__ = [
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
