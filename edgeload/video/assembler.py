"""Deadline batching: stream threads write frames into places of one open batch slot.

The open batch is a :class:`~edgeload.pipeline.slots.SlotPool` slot.  A stream thread
``claim``s a place (its own, or with a fixed batch size, any free place within its
fair share: the rules are in :mod:`edgeload.video._placement`), writes its frame there outside the lock, then ``commit``s.  The mux
thread (:meth:`Assembler.run`) ships the batch to the
:class:`~edgeload.pipeline.prefetch.Prefetcher` when every active stream has filled its place,
or when the deadline since its first frame passes: then it ships partial, with a
validity mask, so one slow or dead camera never holds the others back.

Policies, per stream: ``latest`` never waits (a place filled but not yet shipped is
overwritten with the newer frame; no free slot drops the frame); ``every`` waits for
the next batch (back-pressure down to the reader, and so to the file).
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable

from ..errors import ClosedError
from ..pipeline.lifecycle import POLL_INTERVAL_S
from ..pipeline.prefetch import Prefetcher
from ..pipeline.slots import SlotPool
from ._placement import OpenBatch, Placement, Sealed
from .source import FrameInfo

__all__ = ["MAX_OPEN", "Assembler", "OpenBatch", "Sealed"]

MAX_OPEN = 3
"""Most batches open at once (``every`` streams fill ahead up to this)."""


class Assembler:
    """Builds batches from stream threads' frames and ships them on a deadline.

    Args:
        make_pool: returns a slot pool for a batch of ``n`` places (called again when
            the number of streams changes and the batch follows it).
        batch: a fixed batch size, or None for one place per stream.
        deadline_s: ship a partial batch this long after its first frame.
        prefetcher: where shipped batches go.
        active: returns the ids of streams still delivering, in place order.
        tick: called by the mux thread at least every poll interval (the watchdog).
    """

    def __init__(
        self,
        make_pool: Callable[[int], SlotPool],
        *,
        batch: int | None,
        deadline_s: float,
        prefetcher: Prefetcher[Sealed],
        active: Callable[[], list[int]],
        tick: Callable[[], None] = lambda: None,
    ) -> None:
        self._make_pool = make_pool
        self._rules = Placement(batch, active)
        self.deadline_s = deadline_s
        self._prefetch = prefetcher
        self._active = active
        self._tick = tick
        self._cond = threading.Condition(threading.Lock())
        self._stop = threading.Event()
        # Open batches in shipping order. ``every`` streams may run ahead into later
        # ones, so one stream's slow frame does not idle the others' decode threads.
        self._opens: collections.deque[OpenBatch] = collections.deque()
        self._pools: dict[int, SlotPool] = {}
        self.slot_misses = 0  # latest frames dropped because no slot was free
        self.batches = 0

    def set_streams(self, stream_ids: list[int]) -> None:
        """Give each stream its place (one place per stream); the next batch uses them."""
        with self._cond:
            self._rules.places = {sid: i for i, sid in enumerate(stream_ids)}
            self._cond.notify_all()

    def pools(self) -> list[SlotPool]:
        """Every pool made so far (closed with the loader)."""
        with self._cond:
            return list(self._pools.values())

    def _new_open(self) -> OpenBatch | None:
        """Open a batch on a fresh slot (cond held, never waits); None if none is free."""
        size = self._rules.size()
        pool = self._pools.get(size)
        if pool is None:
            pool = self._pools[size] = self._make_pool(size)
        try:
            slot = pool.acquire(timeout_s=0)
        except (TimeoutError, ClosedError):
            return None
        return OpenBatch(pool, slot, size, opened_at=time.monotonic())

    def claim(self, stream_id: int, *, latest: bool) -> tuple[OpenBatch, int] | None:
        """Reserve a place for a frame of ``stream_id``: ``(batch, place)``, or None to drop it.

        ``latest`` takes a free place in the newest open batch, else overwrites its own
        frame there (never waits); ``every`` takes the first free place in any open
        batch (with a fixed batch size: any free place, first come), opens another (up
        to ``MAX_OPEN``), or waits for room.
        """
        with self._cond:
            while not self._stop.is_set():
                found = self._rules.find(self._opens, stream_id, latest)
                if found is None and (not self._opens or (len(self._opens) < MAX_OPEN and (
                        not latest or self._opens[-1].sealing))):  # fmt: skip
                    fresh = self._new_open()
                    if fresh is not None:
                        self._opens.append(fresh)
                        self._cond.notify_all()
                        continue
                if found is not None:
                    batch, place = found
                    batch.meta.valid[place] = False
                    batch.meta.stream_id[place] = stream_id
                    batch.writing += 1
                    return batch, place
                if latest:
                    self.slot_misses += 1
                    return None
                self._cond.wait(POLL_INTERVAL_S)
        return None

    def latest_target(self, stream_id: int) -> tuple[float, bool, bool] | None:
        """Where a ``latest`` frame of ``stream_id`` would go now (cond taken).

        Returns ``(opened_at, replaces, head)``: when the newest open batch opened,
        whether the frame would replace one of the stream's own there, and whether that
        batch ships next (no older batch is open); None when no batch is open to take
        it.  See :class:`edgeload.video.demand.MixedDemand`.
        """
        with self._cond:
            found = self._rules.find(self._opens, stream_id, True)
            if found is None:
                return None
            batch, place = found
            meta = batch.meta
            replaces = bool(meta.valid[place] and meta.stream_id[place] == stream_id)
            return batch.opened_at, replaces, batch is self._opens[0]

    def commit(self, batch: OpenBatch, place: int, info: FrameInfo | None) -> None:
        """Finish a claimed place: its frame is written (``info``) or abandoned (None)."""
        with self._cond:
            meta = batch.meta
            batch.writing -= 1
            if info is None:
                meta.stream_id[place] = -1
            else:
                meta.valid[place] = True
                meta.seq[place] = info.seq
                meta.pts_ms[place] = info.pts_ms
                meta.captured_at[place] = info.captured_at
            # Wake the mux only when it may act: waking it for every frame costs CPU.
            if info is None or batch.sealing or self._rules.fixed is None or meta.valid.all():
                self._cond.notify_all()

    def stop(self) -> None:
        """Make ``run`` and waiting ``claim`` calls return soon."""
        self._stop.set()

    def run(self) -> None:
        """The mux loop: ship the oldest batch when full, or partial at its deadline."""
        while not self._stop.is_set():
            self._tick()
            with self._cond:
                done = not self._active()
                batch = self._opens[0] if self._opens else None
                if batch is None or (not batch.meta.valid.any() and not done):
                    if done:
                        break
                    self._cond.wait(POLL_INTERVAL_S)
                    continue
                due = batch.opened_at + self.deadline_s
                if not (done or self._rules.full(batch) or time.monotonic() >= due):
                    self._cond.wait(min(POLL_INTERVAL_S, max(0.0, due - time.monotonic())))
                    continue
                batch.sealing = True
                while batch.writing and not self._stop.is_set():
                    self._cond.wait(POLL_INTERVAL_S)
                self._opens.remove(batch)
                self._cond.notify_all()
            if not batch.meta.valid.any():
                batch.pool.release(batch.slot)
                continue
            self._ship(batch.meta)
        with self._cond:
            leftover, self._opens = list(self._opens), collections.deque()
        for batch in leftover:
            batch.pool.release(batch.slot)
        if not self._stop.is_set():
            self._prefetch.put_end()

    def _ship(self, meta: Sealed) -> None:
        nbytes = meta.pool.item_nbytes
        while not self._stop.is_set():
            try:
                self._prefetch.put(meta, nbytes=nbytes, timeout_s=POLL_INTERVAL_S)
                self.batches += 1
                return
            except TimeoutError:
                continue
            except ClosedError:
                break
        meta.pool.release(meta.slot)
