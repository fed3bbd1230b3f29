"""The exceptions edgeload raises.

Every error derives from :class:`EdgeloadError`, so ``except EdgeloadError`` catches
all of them::

    EdgeloadError
    ├── PlatformError        board not recognised, or it cannot do what was asked
    ├── ArgumentError        a bad argument to a function or command (also a ValueError)
    ├── ProfileError         bad value in a profile file (also a ValueError)
    ├── SourceError          a stream could not be opened or read
    ├── WorkerError          a worker raised or died; the original is __cause__
    │   └── WorkerTimeout    no result within the timeout (also a TimeoutError)
    ├── WaitTimeout          no slot or queue room came free in time (also a TimeoutError)
    ├── ClosedError          object used after close()
    └── MissingDependency    torch or cv2 absent (also an ImportError)

Messages name the problem, show the bad value and suggest a next step.
"""

from __future__ import annotations

__all__ = [
    "ArgumentError",
    "ClosedError",
    "EdgeloadError",
    "MissingDependency",
    "PlatformError",
    "ProfileError",
    "SourceError",
    "WaitTimeout",
    "WorkerError",
    "WorkerTimeout",
]


class EdgeloadError(Exception):
    """Base class of every edgeload error."""


class PlatformError(EdgeloadError):
    """The device is not recognised, or cannot give what was asked of it."""


class ArgumentError(EdgeloadError, ValueError):
    """An argument is out of range or of the wrong kind; the message names the parameter."""


class ProfileError(EdgeloadError, ValueError):
    """A profile file or profile value is invalid."""


class SourceError(EdgeloadError):
    """A video source could not be opened or read.

    Attributes:
        source: the source as the user gave it (path, URL, index or pipeline).
    """

    def __init__(self, message: str, *, source: object = None) -> None:
        super().__init__(message)
        self.source = source


class WorkerError(EdgeloadError):
    """A worker raised, or died, while producing an item.

    The original exception, when there is one, is ``__cause__``.

    Attributes:
        index: the item index (datasets) or stream id (video) being produced, if known.
        worker: a description of the worker (thread name or ``pid``), if known.
        traceback_text: the formatted traceback from inside the worker, if any.
    """

    def __init__(
        self,
        message: str,
        *,
        index: object = None,
        worker: str | None = None,
        traceback_text: str | None = None,
    ) -> None:
        super().__init__(message)
        self.index = index
        self.worker = worker
        self.traceback_text = traceback_text


class WorkerTimeout(WorkerError, TimeoutError):
    """No result arrived within the timeout."""


class WaitTimeout(EdgeloadError, TimeoutError):
    """A wait for a free slot or for room in a queue ran past its timeout."""


class ClosedError(EdgeloadError):
    """The object was used after ``close()``."""


class MissingDependency(EdgeloadError, ImportError):
    """An optional dependency (torch, OpenCV) is not importable."""
