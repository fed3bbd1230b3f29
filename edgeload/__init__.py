"""edgeload: data loading for PyTorch on edge devices."""

from ._version import __version__
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
from .plan import Plan, Threads, plan_for
from .probe import Platform, probe
from .profile import Profile, load_profile

__all__ = [
    "ClosedError",
    "EdgeloadError",
    "MissingDependency",
    "Plan",
    "Platform",
    "PlatformError",
    "Profile",
    "ProfileError",
    "SourceError",
    "Threads",
    "WorkerError",
    "WorkerTimeout",
    "__version__",
    "load_profile",
    "plan_for",
    "probe",
]
