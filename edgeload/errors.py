"""The exceptions edgeload raises.

Every error derives from :class:`EdgeloadError`, so ``except EdgeloadError`` catches
all of them::

    EdgeloadError
    ├── PlatformError        board not recognised, or it cannot do what was asked
    ├── ArgumentError        a bad argument to a function or command (also a ValueError)
    ├── ProfileError         bad value in a profile file (also a ValueError)
    ├── StateError           a saved state this loader cannot resume (also a ValueError)
    ├── SourceError          a stream could not be opened or read
    ├── WorkerError          a worker raised or died; the original is __cause__
    │   ├── <Original>       a DataLoader sample raised Original: also an Original
    │   ├── WorkerDied       a worker process exited (also a RuntimeError)
    │   └── WorkerTimeout    no result within the timeout (also a TimeoutError and
    │                        a RuntimeError)
    ├── WaitTimeout          no slot or queue room came free in time (also a TimeoutError)
    ├── ClosedError          object used after close()
    └── MissingDependency    torch or cv2 absent (also an ImportError)

Messages name the problem, show the bad value and suggest a next step.

The rule for a dataset's exception (the ``DataLoader``, any worker kind): what reaches
the loop is an instance of the original type *and* of :class:`WorkerError`, so both
``except KeyError`` (as with torch, which re-raises the original type) and ``except
WorkerError`` catch it.  Its message starts with torch's ``Caught KeyError in DataLoader
worker ...`` and holds the worker's traceback; ``index`` is the sample.  A type that
cannot be built from one message becomes a ``RuntimeError`` that is a WorkerError (torch
raises RuntimeError then too).  Worker death and timeouts are RuntimeErrors, as in torch.
"""

from __future__ import annotations

import logging
import re
from typing import Any

__all__ = [
    "ArgumentError",
    "ClosedError",
    "EdgeloadError",
    "MissingDependency",
    "PlatformError",
    "ProfileError",
    "SourceError",
    "StateError",
    "WaitTimeout",
    "WorkerDied",
    "WorkerError",
    "WorkerTimeout",
]


# A camera URL's password never reaches a message, a log record, stats() or the CLI:
# everything edgeload shows passes through redact(), and only the opening code sees the
# real URL.  The user name stays (it tells which account failed); the password goes.
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<info>[^/\s'\"<>]*)@")
_SECRET_QUERY = re.compile(
    r"(?P<key>[?&;](?:password|passwd|pass|pwd|secret|token|access_token|auth|key|api_key"
    r"|apikey|sig|signature)=)[^&;#\s'\"<>]*",
    re.IGNORECASE,
)
REDACTED = "***"


def _hide_password(match: re.Match[str]) -> str:
    user, colon, _ = match.group("info").partition(":")
    hidden = f"{user}:{REDACTED}" if colon else REDACTED
    return f"{match.group('scheme')}{hidden}@"


def redact(text: object) -> str:
    """``text`` (a URL, or any message holding URLs) with its credentials hidden.

    ``rtsp://admin:Secret@cam/stream`` becomes ``rtsp://admin:***@cam/stream``, a lone
    token (``https://token@host``) becomes ``***@``, and ``password=``, ``token=`` and
    similar query values become ``***``.  Anything else is returned as ``str(text)``.
    """
    out = str(text)
    if "@" in out:
        out = _USERINFO.sub(_hide_password, out)
    if "=" in out:
        out = _SECRET_QUERY.sub(lambda m: m.group("key") + REDACTED, out)
    return out


def _redact_source(source: object) -> object:
    if isinstance(source, str):
        return redact(source)
    if isinstance(source, (list, tuple)):
        return type(source)(_redact_source(s) for s in source)
    return source


class _RedactRecords(logging.Filter):
    """Hides passwords in the records of the ``edgeload`` logger, whatever formatted them."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        shown = redact(text)
        if shown != text:
            record.msg, record.args = shown, None
        return True


# The loggers of the video path log to "edgeload" itself; a filter there covers every
# record they make (a filter on a logger does not see its children's records, which
# redact their messages where they are made).
logging.getLogger("edgeload").addFilter(_RedactRecords())


class EdgeloadError(Exception):
    """Base class of every edgeload error.

    Its message passes through :func:`redact`: whatever a raise site formats (a URL in a
    SourceError, a bad value in an ArgumentError), no password reaches the user.
    """

    def __init__(self, *args: object) -> None:
        super().__init__(*(redact(a) if isinstance(a, str) else a for a in args))


class PlatformError(EdgeloadError):
    """The device is not recognised, or cannot give what was asked of it."""


class ArgumentError(EdgeloadError, ValueError):
    """An argument is out of range or of the wrong kind; the message names the parameter."""


class ProfileError(EdgeloadError, ValueError):
    """A profile file or profile value is invalid."""


class StateError(EdgeloadError, ValueError):
    """A saved state (``state_dict()``, a state file) that this loader cannot resume.

    The message names the file or the key, the bad value and what to do.
    """


class SourceError(EdgeloadError):
    """A video source could not be opened or read.

    Attributes:
        source: the source as the user gave it (path, URL, index or pipeline), with a
            URL's password hidden (:func:`redact`).
    """

    def __init__(self, message: str, *, source: object = None) -> None:
        super().__init__(message)
        self.source = _redact_source(source)


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


class WorkerTimeout(WorkerError, TimeoutError, RuntimeError):
    """No result arrived within the timeout (torch raises RuntimeError for this)."""


class WorkerDied(WorkerError, RuntimeError):
    """A worker process exited while it had work (torch raises RuntimeError for this)."""


_mixed: dict[type, type] = {}


def _reduce_as_original(self: BaseException) -> tuple[Any, ...]:
    # Pickles as the original type: the mixed class exists in this process only.
    return (type(self).__bases__[0], self.args)


def _mixed_str(self: BaseException) -> str:
    return str(self.__dict__.get("_message", BaseException.__str__(self)))


def _mixed_type(original: type[BaseException]) -> type[WorkerError]:
    if issubclass(original, WorkerError):
        return original
    mixed = _mixed.get(original)
    if mixed is None:
        mixed = type(
            original.__name__,
            (original, WorkerError),
            {
                "__module__": original.__module__,
                "__qualname__": original.__qualname__,
                "__reduce__": _reduce_as_original,
                "__str__": _mixed_str,
            },
        )
        _mixed[original] = mixed
    return mixed


def worker_exception(
    original: type[BaseException] | None,
    message: str,
    *,
    exc: BaseException | None = None,
    index: object = None,
    worker: str | None = None,
    traceback_text: str | None = None,
) -> WorkerError:
    """A WorkerError that is also an ``original`` (see the rule in this module's doc).

    Args:
        original: the type the worker raised; None when it could not travel.
        message: the whole message (torch's ``Caught ...`` line and the traceback).
        exc: the exception itself, when it travelled: the result then keeps its
            ``args`` and attributes (``errno``, a KeyError's key), with ``message`` as
            its text, so a type that takes more than a message keeps its type too.
        index, worker, traceback_text: as :class:`WorkerError`.
    """
    out: BaseException | None = None
    if exc is not None and type(exc) is original:
        try:
            out = _mixed_type(original).__new__(_mixed_type(original), *exc.args)
            out.__dict__.update(exc.__dict__)
            out.args = exc.args
        except Exception:  # a type whose __new__ wants other arguments
            out = None
    for kind in (original, RuntimeError):
        if out is not None or kind is None:
            continue
        try:
            out = _mixed_type(kind)(message)
        except Exception:  # a type that takes more than a message, or cannot be mixed
            out = None
    if not isinstance(out, WorkerError):
        out = WorkerError(message)
    out.__dict__["_message"] = message
    out.index = index
    out.worker = worker
    out.traceback_text = traceback_text
    return out


class WaitTimeout(EdgeloadError, TimeoutError):
    """A wait for a free slot or for room in a queue ran past its timeout."""


class ClosedError(EdgeloadError):
    """The object was used after ``close()``."""


class MissingDependency(EdgeloadError, ImportError):
    """An optional dependency (torch, OpenCV) is not importable."""
