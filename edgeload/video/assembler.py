"""Deadline batching: stream threads write frames into places of one open batch slot.

The open batch is a :class:`~edgeload.pipeline.slots.SlotPool` slot.  A stream thread
``claim``s a place (its own, or with a fixed batch size, any free place within its
fair share), writes its frame there outside the lock, then ``commit``s.  The mux
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
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..errors import ClosedError
from ..pipeline.lifecycle import POLL_INTERVAL_S
from ..pipeline.prefetch import Prefetcher
from ..pipeline.slots import Slot, SlotPool
from .source import FrameInfo

MAX_OPEN = 3
"""Most batches open at once (``every`` streams fill ahead up to this)."""


@dataclass
class Sealed:
    """A shipped batch: its slot and per-place metadata, on its way to the consumer."""

    pool: SlotPool
    slot: Slot
    valid: np.ndarray
    stream_id: np.ndarray
    seq: np.ndarray
    pts_ms: np.ndarray
    captured_at: np.ndarray


@dataclass
class _Open:
    pool: SlotPool
    slot: Slot
    size: int
    opened_at: float = 0.0
    writing: int = 0
    sealing: bool = False
    meta: Sealed = field(init=False)

    def __post_init__(self) -> None:
        n = self.size
        self.meta = Sealed(
            self.pool,
            self.slot,
            np.zeros(n, bool),
            np.full(n, -1, np.int64),
            np.full(n, -1, np.int64),
            np.zeros(n, np.float64),
            np.zeros(n, np.float64),
        )


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
        self._fixed = batch
        self.deadline_s = deadline_s
        self._prefetch = prefetcher
        self._active = active
        self._tick = tick
        self._cond = threading.Condition(threading.Lock())
        self._stop = threading.Event()
        # Open batches in shipping order. ``every`` streams may run ahead into later
        # ones, so one stream's slow frame does not idle the others' decode threads.
        self._opens: collections.deque[_Open] = collections.deque()
        self._pools: dict[int, SlotPool] = {}
        self._places: dict[int, int] = {}  # stream id -> place (one place per stream)
        self.slot_misses = 0  # latest frames dropped because no slot was free
        self.batches = 0

    def set_streams(self, stream_ids: list[int]) -> None:
        """Give each stream its place (one place per stream); the next batch uses them."""
        with self._cond:
            self._places = {sid: i for i, sid in enumerate(stream_ids)}
            self._cond.notify_all()

    def pools(self) -> list[SlotPool]:
        """Every pool made so far (closed with the loader)."""
        with self._cond:
            return list(self._pools.values())

    def _size(self) -> int:
        return self._fixed or max(1, len(self._places))

    def _new_open(self) -> _Open | None:
        """Open a batch on a fresh slot (cond held, never waits); None if none is free."""
        size = self._size()
        pool = self._pools.get(size)
        if pool is None:
            pool = self._pools[size] = self._make_pool(size)
        try:
            slot = pool.acquire(timeout_s=0)
        except (TimeoutError, ClosedError):
            return None
        return _Open(pool, slot, size, opened_at=time.monotonic())

    def _place(self, batch: _Open, stream_id: int, latest: bool) -> int | None:
        """A place for ``stream_id`` in ``batch``, or None if it must wait (cond held)."""
        meta = batch.meta
        if self._fixed is None:
            place = self._places.get(stream_id)
            if place is None or place >= batch.size:
                return None
            return place if latest or meta.stream_id[place] < 0 else None
        free = np.flatnonzero(meta.stream_id < 0)
        if not latest:
            # ``every`` streams deliver all their frames anyway: first come, first placed,
            # so a fast file never waits for a slow one (order per stream still holds).
            return int(free[0]) if len(free) else None
        # ``latest`` streams share a batch fairly, or a fast camera would crowd out the rest.
        mine = np.flatnonzero(meta.stream_id == stream_id)
        if len(free) and len(mine) < math.ceil(batch.size / max(1, len(self._active()))):
            return int(free[0])
        return int(mine[-1]) if len(mine) else None

    def claim(self, stream_id: int, *, latest: bool) -> tuple[_Open, int] | None:
        """Reserve a place for a frame of ``stream_id``: ``(batch, place)``, or None to drop it.

        ``latest`` takes a free place in the newest open batch, else overwrites its own
        frame there (never waits); ``every`` takes the first free place in any open
        batch (with a fixed batch size: any free place, first come), opens another (up to ``MAX_OPEN``), or waits for room.
        """
        with self._cond:
            while not self._stop.is_set():
                found = self._find(stream_id, latest)
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

    def _find(self, stream_id: int, latest: bool) -> tuple[_Open, int] | None:
        """Where a frame of ``stream_id`` goes now, or None (cond held)."""
        if latest:
            batch = self._opens[-1] if self._opens else None
            if batch is None or batch.sealing:
                return None
            place = self._place(batch, stream_id, latest=True)
            return None if place is None else (batch, place)
        for batch in self._opens:
            if not batch.sealing:
                place = self._place(batch, stream_id, latest=False)
                if place is not None:
                    return batch, place
        return None

    def commit(self, batch: _Open, place: int, info: FrameInfo | None) -> None:
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
            if info is None or batch.sealing or self._fixed is None or meta.valid.all():
                self._cond.notify_all()

    def _full(self, batch: _Open) -> bool:
        meta = batch.meta
        if self._fixed is not None:
            return bool(meta.valid.all())
        active = [self._places[s] for s in self._active() if s in self._places]
        return bool(active) and all(p < batch.size and meta.valid[p] for p in active)

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
                if not (done or self._full(batch) or time.monotonic() >= due):
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
