"""Where a stream's frame goes among a loader's open batches.

Two rules, one per batch shape.  Without a fixed batch size each stream owns one
place (its index among the streams).  With one, ``every`` streams take the first
free place (first come, first placed), and ``latest`` streams share a batch fairly:
at most their share of the places each, then they overwrite their own newest frame.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..pipeline.slots import Slot, SlotPool


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
        self.meta = Sealed(self.pool, self.slot, flags[0], ids[0], ids[1], times[0], times[1])
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
        handed over (:mod:`edgeload.video._hand_over`); sealing does not wait for them."""

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
