"""What went wrong, as data, and the one way from it to the exception the user sees.

A :class:`Failure` is made where the failure happens, by one constructor per origin:

- :meth:`Failure.capture`: a worker thread or process caught ``exc`` running a task.
  The original travels when it can (it survives a pickle round trip, or it stays in
  this process); its type name, text and traceback always do, so the consumer can say
  what happened even when the original could not be sent.
- :meth:`Failure.raised`: a stream's reader caught ``exc`` (OpenCV, the sink).
- :meth:`Failure.seen`: a stream's reader found a fault that raised nothing (an open
  that returned no capture, a file that ends early, a camera that went silent).

A stream's failure is shown in ``stats()`` and kept until the consumer asks, so both
stream constructors hide URL passwords (OpenCV's text may hold the URL) and clear the
locals of the exception's finished frames (decode buffers, batch slots).

:func:`user_error` turns a Failure into what the consumer raises, and makes every
message: a :class:`~edgeload.errors.WorkerError` for a worker pool's task, the same
in torch's words (and also of the original's type) for a DataLoader's sample, and a
:class:`~edgeload.errors.SourceError` for a stream.  The original, when there is one,
is its ``__cause__``.
"""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any, Literal

from .._compat import format_exception
from ..errors import EdgeloadError, SourceError, WorkerError, redact, worker_exception
from ._lifecycle import release_frames

__all__ = ["Failure", "Origin", "user_error"]

Origin = Literal["pool", "dataset", "stream"]
"""Who consumes a failure, which decides the exception and its words."""


@dataclasses.dataclass(frozen=True)
class Failure:
    """What went wrong: the exception when there is one and it could travel, its text always."""

    exc: BaseException | None
    """The original exception; None when nothing was raised, or it did not survive pickling."""
    type_name: str
    """Its type's qualified name; empty when nothing was raised."""
    message: str
    """What went wrong, in one line (``str(exc)`` for a worker's)."""
    traceback_text: str
    """The formatted traceback from where it was raised; empty when nothing was raised."""
    exc_type: type[BaseException] | None = None
    """The original's type, when it can travel even if the exception cannot (an
    argument that does not pickle): the consumer can still raise one of that type."""

    @property
    def name(self) -> str:
        """The type's own name (``ValueError``), as torch's messages name it."""
        return self.type_name.rpartition(".")[2]

    @classmethod
    def capture(cls, exc: BaseException, *, pickled: bool) -> Failure:
        """A worker's ``exc``; with ``pickled``, keep it only if it survives pickling."""
        return cls(
            exc=exc if not pickled or _pickles(exc) else None,
            type_name=type(exc).__qualname__,
            message=str(exc),
            traceback_text="".join(format_exception(exc)),
            exc_type=type(exc) if not pickled or _pickles(type(exc)) else None,
        )

    @classmethod
    def seen(cls, message: str) -> Failure:
        """A stream fault found without an exception, described by ``message``."""
        return cls(exc=None, type_name="", message=redact(message), traceback_text="")

    @classmethod
    def raised(cls, exc: BaseException, message: str) -> Failure:
        """A stream fault raised as ``exc``, described by ``message``."""
        text = "".join(format_exception(exc))
        release_frames(exc)
        return cls(exc=exc, type_name=type(exc).__qualname__, message=redact(message),
                   traceback_text=redact(text), exc_type=type(exc))  # fmt: skip


def user_error(
    failure: Failure,
    origin: Origin,
    *,
    owner: str,
    what: str = "",
    index: Any = None,
    worker: str | None = None,
    source: object = None,
) -> EdgeloadError:
    """The exception the consumer raises for ``failure``, chained to the original.

    Raise it as it is (``raise user_error(...)``): its ``__cause__`` is already set.

    Args:
        failure: what the worker or the reader recorded.
        origin: ``pool``: a :class:`~edgeload.errors.WorkerError` saying
            ``"{owner}: {what} raised {type}: {message} (in {worker})."``;
            ``dataset``: torch's ``"Caught {type} in {owner} while loading sample
            {index}"``, also an instance of the original's type when that travelled;
            ``stream``: a :class:`~edgeload.errors.SourceError` saying
            ``"{owner}: {message}"``.  A worker's traceback follows its summary.
        owner: who consumed the failure (the pool, the DataLoader's worker, the stream).
        what: for ``pool``, the call that raised (``init_fn``, ``fn on item 3``).
        index, worker: as :class:`~edgeload.errors.WorkerError`.
        source: for ``stream``, the source as the user gave it.
    """
    cause = failure.exc
    error: EdgeloadError
    if origin == "stream":
        error = SourceError(f"{owner}: {failure.message}", source=source)
        # A cause whose text holds a password would print it in the traceback.
        if cause is not None and redact(str(cause)) != str(cause):
            cause = None
    elif origin == "dataset":
        summary = (
            f"Caught {failure.name} in {owner} while loading sample {index!r} "
            f"({failure.name}: {failure.message})."
        )
        error = worker_exception(
            failure.exc_type,
            f"{summary}\nOriginal {failure.traceback_text}",
            exc=cause,
            index=index,
            worker=worker,
            traceback_text=failure.traceback_text,
        )
    else:
        summary = f"{owner}: {what} raised {failure.type_name}: {failure.message} (in {worker})."
        error = WorkerError(
            f"{summary}\nOriginal {failure.traceback_text}",
            index=index,
            worker=worker,
            traceback_text=failure.traceback_text,
        )
    # What ``raise error from cause`` sets.
    error.__cause__ = cause
    error.__suppress_context__ = True
    return error


def _pickles(obj: Any) -> bool:
    try:
        pickle.loads(pickle.dumps(obj))
    except Exception:
        return False
    return True
