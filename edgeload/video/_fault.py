"""What last went wrong with one stream, as data: :class:`StreamFault`.

It has the fields of :class:`~edgeload.pipeline._failure.Failure`, the record a worker's
exception travels in, but is its own type: most stream faults have no exception at
all (an open that returned nothing, a file that ends early, a camera that went
silent), where a ``Failure`` with no exception means one that did not survive
pickling.  ``message`` is the line ``stats()["last_error"]`` shows.
"""

from __future__ import annotations

import dataclasses

from .._compat import format_exception
from ..pipeline._lifecycle import release_frames


@dataclasses.dataclass(frozen=True)
class StreamFault:
    """One fault of a stream: what ``stats()`` shows, and the exception if one was raised."""

    exc: BaseException | None
    """The exception OpenCV or the sink raised; None for a fault seen without one."""
    type_name: str
    """The exception type's qualified name; empty without one."""
    message: str
    """What went wrong, in one line that names the thing and what to do."""
    traceback_text: str
    """The formatted traceback from where it was raised; empty without one."""

    @classmethod
    def seen(cls, message: str) -> StreamFault:
        """A fault the reader found without an exception."""
        return cls(exc=None, type_name="", message=message, traceback_text="")

    @classmethod
    def raised(cls, exc: BaseException, message: str) -> StreamFault:
        """A fault raised as ``exc``, described by ``message``."""
        text = "".join(format_exception(exc))
        # The finished frames' locals (decode buffers, batch slots) are not kept with it.
        release_frames(exc)
        return cls(exc=exc, type_name=type(exc).__qualname__, message=message,
                   traceback_text=text)  # fmt: skip
