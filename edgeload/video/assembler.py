"""Deadline batching: stream threads write frames into places of one open batch slot.

The open batch is a :class:`~edgeload.pipeline.slots.SlotPool` slot.  A stream thread
``claim``s a place (its own, or with a fixed batch size, any free place within its
fair share: the rules are in :mod:`edgeload.video._placement`), writes its frame
there outside the lock, then ``commit``s.  The mux thread (:mod:`edgeload.video._mux`)
ships each batch :meth:`Assembler.seal_next` seals: when every active stream has
filled its place, or when the deadline since it opened passes; then it ships partial,
with a validity mask, so one slow or dead camera never holds the others back.

Policies, per stream: ``latest`` never waits (a place filled but not yet shipped is
overwritten with the newer frame; no free slot drops the frame); ``every`` waits for
the next batch (back-pressure down to the reader, and so to the file).

The consumer's thread, where Ctrl-C lands, takes the assembler's lock as ``with
self._lock`` (C code), never through the Condition: ``Condition.__enter__`` is a
Python frame that an interrupt can leave with the lock taken, and every reader stuck
on it (issue #13).  Nor does it run generators there (``np.isin`` does): an interrupt
inside one that is being closed is printed and lost.
"""

from __future__ import annotations

import collections
import math
import threading
import time
from collections.abc import Callable

import numpy as np

from ..pipeline.lifecycle import POLL_INTERVAL_S
from ._batch_pools import BatchPools
from ._placement import OpenBatch, Placement, Sealed, clear_stale, mark_stale
from ._resize import FrameWriter
from .source import FrameInfo

__all__ = ["MAX_OPEN", "Assembler", "OpenBatch", "OpenBatches", "Sealed"]

MAX_OPEN = 3
"""Most batches open at once (``every`` streams fill ahead up to this)."""


class OpenBatches:
    """The open batches in shipping order, their lock, and where frames go in them:
    the state the readers' side and the mux's side of an :class:`Assembler` share,
    and the consumer's calls on it (``taken``, ``asked``).

    Args:
        pools: the slot pools batches open on.
        batch: a fixed batch size, or None for one place per stream.
        deadline_s: seal a partial batch this long after it opened.
        active: returns the ids of streams still delivering, in place order.
        hand_over: ``latest`` frames beside ``every`` streams are filled in at the
            hand-over (:mod:`edgeload.video._hand_over`), not placed here.
    """

    def __init__(
        self,
        pools: BatchPools,
        *,
        batch: int | None,
        deadline_s: float,
        active: Callable[[], list[int]],
        hand_over: bool = False,
    ) -> None:
        self._pools = pools
        self.rules = self._rules = Placement(batch, active)
        self._rules.hand_over = hand_over
        self.deadline_s = deadline_s
        self._lock = threading.Lock()  # the consumer's thread takes it: see the module
        self._cond = threading.Condition(self._lock)  # the mux waits on it
        # Readers waiting for room wait on their own condition (the same lock), so a
        # batch sealed or opened wakes only those it concerns.
        self._room = threading.Condition(self._lock)
        self.stopped = False
        """Whether :meth:`stop` was called (a plain flag: read on every claim and mux loop)."""
        self._waiting = 0  # readers waiting in a claim for room
        # Open batches in shipping order. ``every`` streams may run ahead into later
        # ones, so one stream's slow frame does not idle the others' decode threads.
        self._opens: collections.deque[OpenBatch] = collections.deque()
        self.slot_misses = 0  # latest frames dropped because no slot was free
        self.finished = False  # no stream delivers and no batch is open: nothing to seal

    def set_streams(self, stream_ids: list[int]) -> None:
        """Give each stream its place (one place per stream); the next batch uses them."""
        with self._lock:
            self._rules.places = {sid: i for i, sid in enumerate(stream_ids)}
            self._cond.notify_all()
            self._room.notify_all()

    def stop(self) -> None:
        """Make ``seal_next`` and waiting ``claim`` calls return soon."""
        self.stopped = True

    def taken(self) -> None:
        """The consumer took a batch: ``latest`` frames in open batches missed it
        (:func:`~edgeload.video._placement.mark_stale`)."""
        if self._rules.latest:
            with self._lock:
                mark_stale(self._opens, self._rules.latest)

    def asked(self) -> None:
        """The consumer asks for a batch: stale frames ship rather than keep it waiting."""
        if self._rules.latest:
            with self._lock:
                clear_stale(self._opens)
                self._cond.notify_all()

    def release_open(self) -> None:
        """Give back the slots of the batches still open (the mux thread, at its end)."""
        with self._cond:
            leftover, self._opens = list(self._opens), collections.deque()
        for batch in leftover:
            batch.pool.release(batch.slot)


class Assembler(OpenBatches):
    """Builds batches from stream threads' frames and seals them on a deadline
    (the arguments are :class:`OpenBatches`').
    """

    def claim(self, stream_id: int, *, latest: bool) -> tuple[OpenBatch, int] | None:
        """Reserve a place for a frame of ``stream_id``: ``(batch, place)``, or None to drop it.

        ``latest`` takes a free place in the newest open batch, else overwrites its own
        frame there (never waits); ``every`` takes the first free place in any open
        batch (with a fixed batch size: any free place, first come), opens another (up
        to ``MAX_OPEN``), or waits for room.
        """
        with self._lock:  # the C lock: no Python frame per frame (Condition.__enter__)
            return self._claim(stream_id, latest)

    def deliver(self, stream_id: int, latest: bool, writer: FrameWriter,
                running: Callable[[], bool], frame: np.ndarray, seq: int, pts_ms: float,
                captured_at: float) -> bool:  # fmt: skip
        """A reader's frame, claimed, written by ``writer`` outside the lock, committed:
        :meth:`claim` and :meth:`commit` in one call (the reader's sink, per frame).
        Returns False when the reader should stop (a dropped frame asks ``running``)."""
        with self._lock:
            found = self._claim(stream_id, latest)
        if found is None:
            return running()
        batch, place = found
        try:
            writer.write(frame, batch.slot.array[place])
        except BaseException:
            self.commit(batch, place, None)
            raise
        with self._lock:
            self._finish(batch, place, seq, pts_ms, captured_at)
        return True

    def _claim(self, stream_id: int, latest: bool) -> tuple[OpenBatch, int] | None:
        while not self.stopped:  # the lock is held; a wait lets it go
            found = self._rules.find(self._opens, stream_id, latest)
            if found is None and (not self._opens or (len(self._opens) < MAX_OPEN and (
                    not latest or self._opens[-1].sealing))):  # fmt: skip
                fresh = self._pools.open_batch(self._rules.size())
                if fresh is not None:
                    self._opens.append(fresh)
                    # Only for a ``latest`` batch's deadline does the mux wake now: a
                    # batch with no frame yet only makes it wait again (0.75 of its 2.7
                    # loops a batch at 4 x 720p); it reads the deadline when it next wakes.
                    if self._rules.latest:
                        self._cond.notify_all()
                    if self._waiting:
                        self._room.notify_all()
                    continue
            if found is not None:
                batch, place = found
                if batch.opened_at == math.inf:  # its first frame since the last take
                    batch.opened_at = time.monotonic()
                batch.stale[place] = False
                if latest and batch.meta.valid[place]:
                    batch.filled -= 1  # its own frame, overwritten
                batch.meta.valid[place] = False
                batch.meta.stream_id[place] = stream_id
                batch.writing += 1
                return batch, place
            if latest:
                self.slot_misses += 1
                return None
            self._waiting += 1
            try:
                self._room.wait(POLL_INTERVAL_S)
            finally:
                self._waiting -= 1
        return None

    def commit(self, batch: OpenBatch, place: int, info: FrameInfo | None) -> None:
        """Finish a claimed place: its frame is written (``info``) or abandoned (None)."""
        with self._lock:
            if info is None:
                self._finish(batch, place, None, 0.0, 0.0)
            else:
                self._finish(batch, place, info.seq, info.pts_ms, info.captured_at)

    def _finish(self, batch: OpenBatch, place: int, seq: int | None, pts_ms: float,
                captured_at: float) -> None:  # fmt: skip
        meta = batch.meta
        batch.writing -= 1
        if seq is None:
            meta.stream_id[place] = -1
        else:
            meta.valid[place] = True
            batch.filled += 1
            meta.seq[place] = seq
            meta.pts_ms[place] = pts_ms
            meta.captured_at[place] = captured_at
        # Wake the mux only when it may act: waking it for every frame costs CPU. It
        # waits for the oldest batch; a later one that fills is sealed when it is next.
        if (
            seq is None
            or batch.sealing
            or (self._opens and batch is self._opens[0] and self._rules.may_seal(batch))
        ):
            self._cond.notify_all()
        if seq is None and self._waiting:
            self._room.notify_all()  # an abandoned place is room

    def seal_next(self) -> Sealed | None:
        """The mux thread's step: the oldest batch, sealed and out of the open ones, once
        it is full, due, or no stream delivers any more; None after waiting at most a
        poll interval without one, or when :attr:`finished`."""
        with self._lock:
            if not self._opens:
                self.finished = not self._rules.active()
                if not self.finished:
                    self._cond.wait(POLL_INTERVAL_S)
                return None
            batch = self._opens[0]
            ready = batch.filled > 0 and (
                self._rules.full(batch) or time.monotonic() >= batch.opened_at + self.deadline_s)  # fmt: skip
            if not ready:  # the streams are listed only now: a full batch seals without
                done = not self._rules.active()
                if batch.filled == 0 and not done:
                    self.finished = False
                    self._cond.wait(POLL_INTERVAL_S)
                    return None
                if not done:
                    due = batch.opened_at + self.deadline_s
                    self._cond.wait(min(POLL_INTERVAL_S, max(0.0, due - time.monotonic())))
                    return None
            batch.sealing = True
            while batch.writing and not self.stopped:
                self._cond.wait(POLL_INTERVAL_S)
            self._opens.remove(batch)
            if self._waiting:
                self._room.notify_all()
        if batch.filled == 0:
            batch.pool.release(batch.slot)  # every claim on it was abandoned
            return None
        return batch.meta
