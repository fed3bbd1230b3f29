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

__all__ = [
    "ClosedError",
    "EdgeloadError",
    "MissingDependency",
    "PlatformError",
    "ProfileError",
    "SourceError",
    "WorkerError",
    "WorkerTimeout",
    "__version__",
]
