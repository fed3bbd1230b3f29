"""One end of a worker pipe that never blocks: framed, pickled messages over a socket.

``Connection.send`` and ``recv`` block until the whole message has moved. A parent
that sends to a worker which stopped reading (hung, stopped, itself blocked writing a
result nobody reads) then waits forever, and Ctrl-C cannot get the user out; a worker
that stops half-way through writing a result does the same to ``recv``. A
:class:`Channel` keeps what it could not write yet in its own buffer, and assembles
what arrives a piece at a time, so every wait happens in a ``poll`` with a timeout that
the caller chooses.

Each message is an 8-byte big-endian length and then the pickle (``ForkingPickler``,
as ``Connection.send`` uses, so torch tensors and file descriptors travel the same way).
"""

from __future__ import annotations

import os
import select
import struct
from collections.abc import Iterable
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from typing import Any

__all__ = ["Channel", "Undecodable", "wait_ready"]

_HEADER = struct.Struct("!Q")
_READ_CHUNK = 1 << 20


class Undecodable:
    """Stands in for a message that arrived whole but could not be unpickled."""

    def __init__(self, exc: Exception) -> None:
        self.exc = exc


class Channel:
    """Buffered, non-blocking messages over ``conn``'s socket (which it keeps open).

    Args:
        conn: one end of ``multiprocessing.Pipe(duplex=True)``.
    """

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self.fd = conn.fileno()
        os.set_blocking(self.fd, False)
        self._out = bytearray()
        self._in = bytearray()
        self.eof = False
        """The other end closed (or died): nothing more will arrive."""

    def fileno(self) -> int:
        return self.fd

    @property
    def unsent(self) -> int:
        """Bytes queued that the other end has not taken yet."""
        return len(self._out)

    @property
    def partial(self) -> int:
        """Bytes of a message that has started to arrive but is not complete."""
        return len(self._in)

    def put(self, obj: Any) -> None:
        """Queue ``obj`` and send what the socket takes now; never blocks.

        Raises:
            Exception: ``obj`` does not pickle (nothing is queued then).
            BrokenPipeError, ConnectionResetError: the other end is gone.
        """
        data = ForkingPickler.dumps(obj)
        self._out += _HEADER.pack(len(data))
        self._out += data
        self.flush()

    def flush(self) -> bool:
        """Write what the socket takes without blocking; True once nothing is left."""
        while self._out:
            try:
                sent = os.write(self.fd, self._out[:_READ_CHUNK])
            except BlockingIOError:
                return False
            del self._out[:sent]
        return True

    def take(self) -> list[Any]:
        """Read what has arrived without blocking; return the complete messages.

        A message that does not unpickle comes back as :class:`Undecodable`; ``eof``
        tells when the other end is gone.
        """
        while not self.eof:
            try:
                chunk = os.read(self.fd, _READ_CHUNK)
            except BlockingIOError:
                break
            except ConnectionResetError:
                # The other end closed with our data unread; what it sent before is
                # already here and still counts.
                self.eof = True
                break
            if not chunk:
                self.eof = True
            self._in += chunk
        messages = []
        while len(self._in) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(self._in)
            end = _HEADER.size + size
            if len(self._in) < end:
                break
            data = bytes(self._in[_HEADER.size : end])
            del self._in[:end]
            try:
                messages.append(ForkingPickler.loads(data))
            except Exception as exc:  # e.g. a tensor whose sender died before we attached
                messages.append(Undecodable(exc))
        return messages

    def close(self) -> None:
        self._conn.close()


def wait_ready(
    readers: Iterable[Any], writers: Iterable[Any], timeout_s: float
) -> tuple[set[int], set[int]]:
    """Wait at most ``timeout_s`` for any of ``readers`` (or sentinels) to be readable or
    ``writers`` writable; return the ready file descriptors as (readable, writable).

    Uses ``poll``, which has no limit on descriptor numbers (``select`` stops at 1024).
    A hang-up or error counts as readable, so the caller reads and sees the end.
    """
    poller = select.poll()
    masks: dict[int, int] = {}
    for obj in readers:
        fd = obj if isinstance(obj, int) else obj.fileno()
        masks[fd] = masks.get(fd, 0) | select.POLLIN
    for obj in writers:
        fd = obj if isinstance(obj, int) else obj.fileno()
        masks[fd] = masks.get(fd, 0) | select.POLLOUT
    for fd, mask in masks.items():
        poller.register(fd, mask)
    readable, writable = set(), set()
    for fd, event in poller.poll(max(0, int(timeout_s * 1000 + 0.999))):
        if event & (select.POLLIN | select.POLLHUP | select.POLLERR | select.POLLNVAL):
            readable.add(fd)
        if event & select.POLLOUT:
            writable.add(fd)
    return readable, writable
