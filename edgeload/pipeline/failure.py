"""The one way an exception travels as data: from a worker thread or process to the consumer.

A :class:`Failure` keeps the original exception when it can travel (it survives a pickle
round trip, or it stays in this process), and its type name, text and traceback always,
so the consumer can raise a :class:`~edgeload.errors.WorkerError` that says what happened
even when the original could not be sent.
"""

from __future__ import annotations

import dataclasses
import pickle

from .._compat import format_exception

__all__ = ["Failure"]


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

    @classmethod
    def capture(cls, exc: BaseException, *, pickled: bool) -> Failure:
        """Describe ``exc``; with ``pickled``, keep it only if it survives pickling."""
        keep: BaseException | None = exc
        if pickled:
            try:
                pickle.loads(pickle.dumps(exc))
            except Exception:
                keep = None
        return cls(
            exc=keep,
            type_name=type(exc).__qualname__,
            message=str(exc),
            traceback_text="".join(format_exception(exc)),
        )
