"""``latest`` frames beside ``every`` streams: filled in as the batch is handed over.

In a loader that also has ``every`` streams, a batch is sealed once the ``every``
streams have filled it, and then waits in the prefetch queue (up to ``slot_count -
2`` batches, so their readers never idle).  A ``latest`` frame placed when the batch
is sealed waits there with it: with a 150 ms model it was 1.07 s old at the median
(``docs/performance.md``).  So, while an ``every`` stream is active, a ``latest``
stream's reader converts into a :class:`FreshFrame` of its own, timed by the
consumer's cadence (:class:`~edgeload.video.demand.Demand`), and the consumer's
thread copies the newest one into the batch as it hands the batch over
(:meth:`HandOver.fill`: one copy of a place, about 0.3 ms at 640x640).  The
``every`` streams leave those places empty (:mod:`edgeload.video._assembler`).
Once no ``every`` stream is active, ``latest`` frames go into the batches directly,
as in an all-``latest`` loader.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

from ._assembler import Placement, Sealed
from ._resize import FrameWriter
from .source import FrameInfo


class FreshFrame:
    """One ``latest`` stream's newest converted frame, until it is handed over once.

    Three buffers: the newest, the one the consumer may be copying, and the one the
    reader writes next, so neither side waits for the other's copy.

    Args:
        shape: a batch place's array shape.
    """

    def __init__(self, shape: tuple[int, ...]) -> None:
        self._shape = shape
        self._buffers: list[np.ndarray] = []  # made at the first frame
        self._lock = threading.Lock()
        self._newest: int | None = None
        self._reading: int | None = None
        self._info: FrameInfo | None = None  # None: nothing new since the last hand-over
        self.handed = 0  # hand-overs so far: with a fixed batch the fewest go first

    def write(self, frame: np.ndarray, info: FrameInfo, writer: FrameWriter) -> None:
        """The reader's side: convert ``frame`` into a free buffer, then make it the newest."""
        with self._lock:
            if not self._buffers:
                self._buffers = [np.empty(self._shape, np.uint8) for _ in range(3)]
            index = next(i for i in range(3) if i not in (self._newest, self._reading))
        writer.write(frame, self._buffers[index])
        with self._lock:
            self._newest, self._info = index, info

    def hand_into(self, place: np.ndarray) -> FrameInfo | None:
        """The consumer's side: copy the newest frame into ``place`` and return its info;
        None (``place`` untouched) when no frame came since the last hand-over."""
        with self._lock:
            info, index = self._info, self._newest
            if info is None or index is None:
                return None
            self._info, self._reading = None, index
        try:
            np.copyto(place, self._buffers[index])
        finally:
            with self._lock:
                self._reading = None
        self.handed += 1
        return info


class HandOver:
    """A mixed loader's ``latest`` streams and their fresh frames.

    Args:
        rules: the assembler's placement rules (which places the ``every`` streams
            leave free).
    """

    def __init__(self, rules: Placement) -> None:
        self._rules = rules
        self._fresh: dict[int, FreshFrame] = {}
        self._lock = threading.Lock()  # readers register while the consumer fills

    def register(self, stream_id: int, shape: tuple[int, ...]) -> FreshFrame:
        """The fresh frame of ``latest`` stream ``stream_id`` (made on its first reader)."""
        with self._lock:
            fresh = self._fresh.get(stream_id)
            if fresh is None:
                fresh = self._fresh[stream_id] = FreshFrame(shape)
            return fresh

    def fill(self, sealed: Sealed, known: Callable[[int], bool]) -> None:
        """Copy each ``latest`` stream's newest frame into a free place of ``sealed``,
        the batch the consumer takes now (in its thread): its own place, or with a
        fixed batch size the next free one, the streams handed over least first.
        ``known`` says whether a stream is still in the loader (removed ones go)."""
        if not self._fresh:
            return  # no ``latest`` stream has registered: nothing to fill, every batch
        with self._lock:
            for sid in [s for s in self._fresh if not known(s)]:
                del self._fresh[sid]
            streams = sorted(self._fresh.items(), key=lambda item: item[1].handed)
        free = [int(p) for p in np.flatnonzero(sealed.stream_id < 0)]
        for sid, fresh in streams:
            if self._rules.fixed is None:
                place = self._rules.places.get(sid, -1)
                if place not in free:
                    continue
            elif free:
                place = free[0]
            else:
                break
            info = fresh.hand_into(sealed.slot.array[place])
            if info is None:
                continue
            free.remove(place)
            sealed.valid[place] = True
            sealed.stream_id[place] = sid
            sealed.seq[place] = info.seq
            sealed.pts_ms[place] = info.pts_ms
            sealed.captured_at[place] = info.captured_at
