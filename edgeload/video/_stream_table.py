"""The streams of one loader, by id: added and removed while the readers run.

The consumer's thread adds and removes entries; the mux thread and the readers'
sinks read them.  One lock guards the table itself; an entry's counters are written
by one thread each (the consumer's: ``last_seq``, ``delivered``, ``drops``).
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

from ._capture import Target
from ._reader import StreamReader
from ._resize import FrameWriter
from .source import Policy, VideoSource, as_source

_log = logging.getLogger("edgeload")

# A reader for this entry, gated on these events; started by the table.
MakeReader = Callable[["StreamEntry", "list[threading.Event]"], StreamReader]


class StreamEntry:
    """One stream of a loader and what its consumer has received from it."""

    def __init__(self, sid: int, source: VideoSource, writer: FrameWriter) -> None:
        self.sid, self.source, self.writer = sid, source, writer
        self.reader: StreamReader | None = None
        self.target: Any = None
        self.last_seq = -1  # the last seq the consumer received (resume starts after it)
        self.delivered = 0
        self.drops = 0
        self.error_reported = False


class StreamTable:
    """A loader's :class:`StreamEntry` rows by id, and their readers' start and stop.

    Args:
        make_writer: a fresh frame writer for each new stream.
        policy: set on every source added; None leaves each source's own.
    """

    def __init__(self, make_writer: Callable[[], FrameWriter], policy: Policy | None) -> None:
        self._make_writer, self._policy = make_writer, policy
        self._streams: dict[int, StreamEntry] = {}
        self._next_id = 0
        self._lock = threading.Lock()
        self._places: Callable[[list[int]], None] = lambda ids: None

    def keep_placed(self, places: Callable[[list[int]], None]) -> None:
        """Give ``places`` (the assembler's) the stream ids now and after each change."""
        self._places = places
        places(self.ids())

    def add(
        self, source: Any, target: Callable[[VideoSource], Target] | None = None
    ) -> StreamEntry:
        """Add ``source`` (anything :func:`~edgeload.video.source.as_source` takes).

        With ``target``, the stream's target is found first, so a source that cannot be
        opened here never enters the table.

        Raises:
            SourceError: the source cannot be used.
        """
        src = as_source(source)
        if self._policy is not None:
            src.policy = self._policy
        aimed = None if target is None else target(src)
        with self._lock:
            sid, self._next_id = self._next_id, self._next_id + 1
            stream = self._streams[sid] = StreamEntry(sid, src, self._make_writer())
            stream.target = aimed
        self._places(self.ids())
        return stream

    def remove(self, sid: int, *, timeout_s: float) -> None:
        """Take stream ``sid`` out of the table, then stop its reader.

        Raises:
            KeyError: no such stream.
        """
        with self._lock:
            stream = self._streams.pop(sid)
        self._places(self.ids())
        if stream.reader is not None:
            stream.reader.stop()
            if not stream.reader.join(timeout_s):
                _log.warning("edgeload: stream %d reader did not stop in time", sid)

    def get(self, sid: int) -> StreamEntry | None:
        """Stream ``sid``, or None when it was removed."""
        with self._lock:
            return self._streams.get(sid)

    def snapshot(self) -> dict[int, StreamEntry]:
        """The streams now, by id (a copy)."""
        with self._lock:
            return dict(self._streams)

    def entries(self) -> list[StreamEntry]:
        """The streams now, in id order."""
        with self._lock:
            return list(self._streams.values())

    def ids(self) -> list[int]:
        """The stream ids now, in order (a batch's places follow it)."""
        with self._lock:
            return list(self._streams)

    def active(self) -> list[int]:
        """The ids of the streams not known to be done (not started counts as active)."""
        return [
            s.sid for s in self.entries() if s.reader is None or not s.reader.connection.phase.done
        ]

    def phases(self) -> dict[str, str]:
        """Each stream's connection phase by name (``pending`` before its reader starts)."""
        return {s.source.name: s.reader.connection.phase.value if s.reader else "pending"
                for s in self.entries()}  # fmt: skip

    def start(
        self, stream: StreamEntry, make_reader: MakeReader, gate: list[threading.Event]
    ) -> None:
        """Make and start ``stream``'s reader."""
        stream.reader = make_reader(stream, gate)
        stream.reader.start()

    def start_all(self, make_reader: MakeReader) -> None:
        """Start every stream's reader: local inputs first, as a network open holds
        OpenCV's global FFmpeg lock; network ones wait for the local ones to open."""
        streams = self.entries()
        local = [s for s in streams if not s.source.network]
        for stream in local + [s for s in streams if s.source.network]:
            gate = [s.reader.connection.opened for s in local if s.reader]
            self.start(stream, make_reader, gate)

    def stop_readers(self) -> list[threading.Thread]:
        """Ask every reader to stop; return their threads, to join."""
        readers = [s.reader for s in self.entries() if s.reader is not None]
        for reader in readers:
            reader.stop()
        return [r.thread for r in readers]
