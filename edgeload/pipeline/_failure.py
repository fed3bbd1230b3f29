"""The one way an exception travels as data: from a worker thread or process to the consumer.

A :class:`Failure` keeps the original exception when it can travel (it survives a pickle
round trip, or it stays in this process), and its type name, text and traceback always,
so the consumer can raise a :class:`~edgeload.errors.WorkerError` that says what happened
even when the original could not be sent.  :func:`worker_error` builds that error, for
the worker pool and the DataLoader alike.
"""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

from .._compat import format_exception
from ..errors import WorkerError, worker_exception

__all__ = ["Failure", "worker_error"]


@dataclasses.dataclass
class Failure:
    """An exception from a worker, as data: the original when it pickles, its text always."""

    exc: BaseException | None
    """The original exception; None when it did not survive pickling."""
    type_name: str
    """Its type's qualified name."""
    message: str
    """``str(exc)``."""
    traceback_text: str
    """The formatted traceback from where it was raised."""
    exc_type: type[BaseException] | None = None
    """The original's type, when it can travel even if the exception cannot (an
    argument that does not pickle): the consumer can still raise one of that type."""

    @property
    def name(self) -> str:
        """The type's own name (``ValueError``), as torch's messages name it."""
        return self.type_name.rpartition(".")[2]

    @classmethod
    def capture(cls, exc: BaseException, *, pickled: bool) -> Failure:
        """Describe ``exc``; with ``pickled``, keep it only if it survives pickling."""
        return cls(
            exc=exc if not pickled or _pickles(exc) else None,
            type_name=type(exc).__qualname__,
            message=str(exc),
            traceback_text="".join(format_exception(exc)),
            exc_type=type(exc) if not pickled or _pickles(type(exc)) else None,
        )


def worker_error(
    failure: Failure,
    summary: str,
    *,
    index: Any = None,
    worker: str | None = None,
    as_original: bool = False,
) -> WorkerError:
    """The :class:`~edgeload.errors.WorkerError` for ``failure``: ``summary`` (who raised
    what, doing what), then the worker's traceback; raise it ``from failure.exc``.

    Args:
        failure: what the worker captured.
        summary: one sentence naming the consumer, the worker and the item.
        index, worker: as :class:`~edgeload.errors.WorkerError`.
        as_original: make it also an instance of the original's type when that
            travelled (torch's DataLoader raises the dataset's own exception type).
    """
    message = f"{summary}\nOriginal {failure.traceback_text}"
    if as_original:
        return worker_exception(
            failure.exc_type,
            message,
            exc=failure.exc,
            index=index,
            worker=worker,
            traceback_text=failure.traceback_text,
        )
    return WorkerError(message, index=index, worker=worker, traceback_text=failure.traceback_text)


def _pickles(obj: Any) -> bool:
    try:
        pickle.loads(pickle.dumps(obj))
    except Exception:
        return False
    return True
