"""Deadline batching: stream threads write frames into places of one open batch slot.

The open batch is a :class:`~edgeload.pipeline.slots.SlotPool` slot.  A stream thread
``claim``s a place (its own, or with a fixed batch size, any free place within its
fair share: the rules are :class:`Placement`'s), writes its frame there outside the
lock, then ``commit``s.  The mux thread (:mod:`edgeload.video._mux`) ships each batch
:meth:`Assembler.seal_next` seals: when every active stream has filled its place, or
when the deadline since it opened passes; then it ships partial, with a validity mask,
so one slow or dead camera never holds the others back.

Policies, per stream: ``latest`` never waits (a place filled but not yet shipped is
overwritten with the newer frame; no free slot drops the frame); ``every`` waits for
the next batch (back-pressure down to the reader, and so to the file).

**Where a stream's frame goes** among a loader's open batches (:class:`Placement`).
Two rules, one per batch shape.  Without a fixed batch size each stream owns one
place (its index among the streams).  With one, ``every`` streams take the first
free place (first come, first placed), and ``latest`` streams share a batch fairly:
at most their share of the places each, then they overwrite their own newest frame.

**The slot pools** a loader's batches open on (:class:`BatchPools`): one per batch
size, made on first use.  With ``batch=None`` the batch follows the number of
streams, so after ``add()`` or ``remove()`` the next batch opens on a pool of the new
shape.  The old pools stay until the loader closes, so batches the user still holds
stay valid.

The consumer's thread, where Ctrl-C lands, takes the assembler's lock as ``with
self._lock`` (C code), never through the Condition: ``Condition.__enter__`` is a
Python frame that an interrupt can leave with the lock taken, and every reader stuck
on it.  Nor does it run generators there (``np.isin`` does): an interrupt
inside one that is being closed is printed and lost.
"""

from __future__ import annotations

import collections
import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..errors import ClosedError
from ..pipeline._lifecycle import POLL_INTERVAL_S
from ..pipeline.slots import Slot, SlotPool
from ._resize import FrameWriter, Geometry
from .source import FrameInfo

if TYPE_CHECKING:  # a runtime import would load the CUDA modules early
    from ..cuda.engine import Engine

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
            hand-over (:class:`~edgeload.video._mux.HandOver`), not placed here.
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
            for batch in self._opens:
                forget_removed(batch, self._rules.places)
            self._cond.notify_all()
            self._room.notify_all()

    def stop(self) -> None:
        """Make ``seal_next`` and waiting ``claim`` calls return soon."""
        self.stopped = True

    def taken(self) -> None:
        """The consumer took a batch: ``latest`` frames in open batches missed it
        (:func:`mark_stale`)."""
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
            geometry = writer.write(frame, batch.slot.array[place])
        except BaseException:
            self.commit(batch, place, None)
            raise
        with self._lock:
            self._finish(batch, place, seq, pts_ms, captured_at, geometry)
        return True

    def _claim(self, stream_id: int, latest: bool) -> tuple[OpenBatch, int] | None:
        while not self.stopped:  # the lock is held; a wait lets it go
            if stream_id not in self._rules.places:
                return None  # removed: its reader is stopping, and no frame of it ships
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

    def commit(
        self, batch: OpenBatch, place: int, info: FrameInfo | None,
        geometry: Geometry | None = None,
    ) -> None:  # fmt: skip
        """Finish a claimed place: its frame is written (``info``, placed as ``geometry``
        says; None: it fills the place) or abandoned (None)."""
        with self._lock:
            if info is None:
                self._finish(batch, place, None, 0.0, 0.0, None)
            else:
                self._finish(batch, place, info.seq, info.pts_ms, info.captured_at, geometry)

    def _finish(self, batch: OpenBatch, place: int, seq: int | None, pts_ms: float,
                captured_at: float, geometry: Geometry | None) -> None:  # fmt: skip
        meta = batch.meta
        batch.writing -= 1
        if seq is None or int(meta.stream_id[place]) not in self._rules.places:
            meta.stream_id[place] = -1  # abandoned, or its stream was removed meanwhile
            seq = None
        else:
            meta.valid[place] = True
            batch.filled += 1
            meta.seq[place] = seq
            meta.pts_ms[place] = pts_ms
            meta.captured_at[place] = captured_at
            meta.geometry[place] = geometry
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

    def seal_empty(self) -> Sealed | None:
        """A batch with no frame, for a consumer that waited a deadline while no stream
        streams: the oldest open batch when it holds no frame, else a fresh one; None
        when the oldest holds frames (it ships at its own deadline) or no slot is free."""
        with self._lock:
            if self._opens:
                batch = self._opens[0]
                if batch.filled or batch.writing:
                    return None
                self._opens.popleft()
                if self._waiting:
                    self._room.notify_all()
                return batch.meta
        fresh = self._pools.open_batch(self._rules.size())
        return None if fresh is None else fresh.meta

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
    geometry: list[Geometry | None]
    """Per place: where its frame's picture lies (recorded as it is written, since a
    stream's resolution can change on reconnect); None: it fills the place."""


@dataclass
class OpenBatch:
    """A batch being filled: its slot, and the places being written right now."""

    pool: SlotPool
    slot: Slot
    size: int
    opened_at: float = 0.0
    writing: int = 0
    """Places claimed and not yet committed: the batch ships only when this is 0."""
    sealing: bool = False
    """The mux is shipping it: no new claims."""
    meta: Sealed = field(init=False)
    stale: np.ndarray = field(init=False)
    """Per place: its ``latest`` frame was placed after the batch before was sealed and
    before the consumer took that one, so it would reach the consumer a whole model
    step late.  Until the consumer asks again it does not make the batch full (a
    newer frame of its stream replaces it); then it ships rather than keep the
    consumer waiting, as it does in a partial batch."""

    filled: int = 0
    """Places holding a committed frame (``meta.valid`` counted, kept by the assembler)."""

    def __post_init__(self) -> None:
        # Three arrays, each field a row of one: a batch opens ~60 times a second at
        # 4 x 720p, and numpy's ``full`` is three calls (``docs/performance.md``).
        n = self.size
        ids = np.empty((2, n), np.int64)
        ids.fill(-1)
        times, flags = np.zeros((2, n), np.float64), np.zeros((2, n), bool)
        self.meta = Sealed(self.pool, self.slot, flags[0], ids[0], ids[1], times[0], times[1],
                           [None] * n)  # fmt: skip
        self.stale = flags[1]


class Placement:
    """The placement rules for one loader (called with the assembler's lock held).

    Args:
        fixed: a fixed batch size, or None for one place per stream.
        active: the ids of the streams still delivering, in place order.
    """

    def __init__(self, fixed: int | None, active: Callable[[], list[int]]) -> None:
        self.fixed = fixed
        self.active = active
        self.places: dict[int, int] = {}  # stream id -> place (one place per stream)
        self.latest: set[int] = set()  # the ``latest`` streams
        self.hand_over = False
        """``latest`` frames beside active ``every`` streams are filled in as a batch is
        handed over (:class:`~edgeload.video._mux.HandOver`); sealing does not wait for them."""

    def handing_over(self) -> bool:
        """Whether ``latest`` frames are filled in at the hand-over now (never in a
        loader with no ``latest`` stream: asked on every claim, it then returns before
        listing the active streams, 1.4 times a frame at 4 x 720p)."""
        if not self.hand_over or not self.latest:
            return False
        return any(s not in self.latest for s in self.active())

    def waited_for(self) -> list[int]:
        """The active streams whose frames a batch waits for."""
        active = self.active()
        if self.hand_over and self.latest:
            every = [s for s in active if s not in self.latest]
            return every or active
        return active

    def _kept_free(self) -> int:
        """Places of a fixed batch the ``every`` streams leave for the hand-over: one per
        active ``latest`` stream, and at least one for them."""
        if self.fixed is None or not self.handing_over():
            return 0
        latest = sum(1 for s in self.active() if s in self.latest)
        return min(latest, self.fixed - 1)

    def size(self) -> int:
        """The places of the next batch."""
        return self.fixed or max(1, len(self.places))

    def find(
        self, opens: Sequence[OpenBatch], stream_id: int, latest: bool
    ) -> tuple[OpenBatch, int] | None:
        """Where a frame of ``stream_id`` goes now, or None: ``latest`` looks only in
        the newest open batch, ``every`` in each open batch in shipping order."""
        if latest:
            newest = opens[-1] if opens else None
            if newest is None or newest.sealing:
                return None
            place = self._place(newest, stream_id, latest=True)
            return None if place is None else (newest, place)
        for batch in opens:
            if not batch.sealing:
                place = self._place(batch, stream_id, latest=False)
                if place is not None:
                    return batch, place
        return None

    def _place(self, batch: OpenBatch, stream_id: int, latest: bool) -> int | None:
        # Every claim runs this for each open batch, with the lock held: the few places
        # are scanned as Python lists (``tolist`` once), not with numpy's small-array
        # calls, which cost microseconds each (``docs/performance.md``).
        meta = batch.meta
        if self.fixed is None:
            place = self.places.get(stream_id)
            if place is None or place >= batch.size:
                return None
            return place if latest or meta.stream_id[place] < 0 else None
        owners: list[int] = meta.stream_id.tolist()
        if not latest:
            # ``every`` streams deliver all their frames anyway: first come, first placed,
            # so a fast file never waits for a slow one (order per stream still holds).
            if -1 not in owners:
                return None
            # Places kept for the hand-over: only a loader with ``latest`` streams has any.
            if self.latest and owners.count(-1) <= self._kept_free():
                return None
            return owners.index(-1)
        # ``latest`` streams share a batch fairly, or a fast camera would crowd out the rest.
        mine = [p for p, s in enumerate(owners) if s == stream_id]
        stale: list[bool] = batch.stale.tolist()
        old = [p for p in mine if stale[p]]
        if old:
            return old[0]  # a stale frame of its own goes first
        if -1 in owners and len(mine) < math.ceil(batch.size / max(1, len(self.active()))):
            return owners.index(-1)
        return mine[-1] if mine else None

    def may_seal(self, batch: OpenBatch) -> bool:
        """Whether a frame just committed may let the mux seal ``batch`` (each commit
        asks): with one place per stream, always; with a fixed size, once every place
        holds a frame."""
        return self.fixed is None or batch.filled >= batch.size

    def full(self, batch: OpenBatch) -> bool:
        """Whether every place the batch waits for holds a frame."""
        if self.fixed is not None and not self.latest:
            return batch.filled >= self.fixed  # no stale frames, no places kept free
        valid: list[bool] = batch.meta.valid.tolist()
        stale: list[bool] = batch.stale.tolist()
        if self.fixed is not None:
            ready = sum(1 for v, old in zip(valid, stale) if v and not old)
            return ready >= self.fixed - self._kept_free()
        waited = [self.places[s] for s in self.waited_for() if s in self.places]
        return bool(waited) and all(p < batch.size and valid[p] and not stale[p] for p in waited)


def forget_removed(batch: OpenBatch, places: dict[int, int]) -> None:
    """Drop the committed frames of streams no longer in ``places`` from ``batch`` (a
    frame being written is dropped when it commits)."""
    meta = batch.meta
    for place, sid in enumerate(meta.stream_id.tolist()):
        if sid >= 0 and sid not in places and meta.valid[place]:
            meta.valid[place] = False
            meta.stream_id[place] = -1
            batch.filled -= 1


def mark_stale(opens: Iterable[OpenBatch], latest: set[int]) -> None:
    """The consumer took a batch: the ``latest`` frames already in ``opens`` missed it
    (:attr:`OpenBatch.stale`); a batch of only those has no deadline until its next."""
    ids = np.array(list(latest), np.int64)
    for batch in opens:
        placed = (batch.meta.stream_id[:, None] == ids).any(axis=1)
        if not batch.sealing and placed.any():
            batch.stale |= placed
            if placed.sum() == (batch.meta.stream_id >= 0).sum():
                batch.opened_at = math.inf


def clear_stale(opens: Iterable[OpenBatch]) -> None:
    """The consumer asks for a batch: stale frames count again, and a batch of only
    those is due a deadline from now."""
    now = time.monotonic()
    for batch in opens:
        batch.stale[:] = False
        batch.opened_at = min(batch.opened_at, now)


class BatchPools:
    """A loader's batch slot pools, by batch size.

    Args:
        slot_shape: the array shape of a slot with ``n`` places.
        count: slots per pool.
        memory_mode: the slots' memory mode. engine: the GPU engine behind it.
    """

    def __init__(
        self,
        slot_shape: Callable[[int], tuple[int, ...]],
        *,
        count: int,
        memory_mode: str,
        engine: Engine | None,
    ) -> None:
        self._slot_shape, self._count = slot_shape, count
        self._mode, self._engine = memory_mode, engine
        self._lock = threading.Lock()
        self._pools: dict[int, SlotPool] = {}
        self._closed = False

    def free_slot(self, places: int) -> tuple[SlotPool, Slot] | None:
        """A free slot for a batch of ``places`` frames, without waiting; None if none is.

        Raises:
            ClosedError: the loader closed (a reader that outlived it makes no new memory).
        """
        with self._lock:
            pool = self._pools.get(places)
            if pool is None:
                if self._closed:
                    raise ClosedError("StreamLoader: closed; no new batch slots")
                pool = self._pools[places] = SlotPool(
                    self._slot_shape(places), np.uint8, count=self._count,
                    mode=self._mode,  # type: ignore[arg-type]
                    name="StreamLoader slots", engine=self._engine,
                )  # fmt: skip
        try:
            return pool, pool.acquire(timeout_s=0)
        except (TimeoutError, ClosedError):
            return None

    def open_batch(self, places: int) -> OpenBatch | None:
        """A batch of ``places`` opened now on a free slot; None if none is free."""
        free = self.free_slot(places)
        return None if free is None else OpenBatch(*free, places, opened_at=time.monotonic())

    def all(self) -> list[SlotPool]:
        """Every pool made so far."""
        with self._lock:
            return list(self._pools.values())

    def close(self) -> None:
        """Close every pool (after the threads that use them are joined)."""
        with self._lock:
            self._closed = True
            pools = list(self._pools.values())
        for pool in pools:
            pool.close()
