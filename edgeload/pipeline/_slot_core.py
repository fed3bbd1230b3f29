"""The slot pool's types and bookkeeping: slot memory, and which slot is where.

Kept apart from :mod:`edgeload.pipeline.slots` so the pool's finalizer and the weak-reference
callbacks hold this state and never the pool itself.
"""

from __future__ import annotations

import dataclasses
import threading
import weakref
from typing import Any, Callable, Protocol

import numpy as np

from ._shm import SlotRef

__all__ = ["Allocator", "Backing", "PoolCore", "Releaser", "Slot", "SlotStats"]


class Backing(Protocol):
    """Memory behind one or more slots, as an allocator returns it."""

    @property
    def buffer(self) -> memoryview:
        """The whole region, writable, starting page-aligned."""

    @property
    def name(self) -> str | None:
        """The shared segment's name for :class:`SlotRef`, or None when private."""

    @property
    def shm_dir(self) -> str:
        """The directory of the shared segment ("" when private)."""

    def close(self) -> None:
        """Free (and unlink) the memory; views still alive keep their pages mapped."""


Allocator = Callable[[int, bool, str], Backing]
"""``allocator(nbytes, shared, shm_dir) -> Backing``."""


@dataclasses.dataclass(frozen=True)
class Slot:
    """One acquired slot, for the producer to fill."""

    index: int
    """Its index in the pool (stable for the pool's life)."""
    array: np.ndarray
    """The whole slot, writable, in this process."""
    ref: SlotRef | None
    """For a process worker: ``attach(ref)`` gives the same memory; None if not shared."""


@dataclasses.dataclass(frozen=True)
class SlotStats:
    """A snapshot of a :class:`SlotPool`."""

    count: int
    """Slots allocated now (grows within max_bytes)."""
    free: int
    acquired: int
    """Held by producers (acquired, not yet leased or released)."""
    leased: int
    """Views held by the consumer."""
    copies: int
    """Batches delivered as copies because the consumer kept every slot."""
    nbytes: int
    """Bytes allocated."""
    gpu_waits: int = 0
    """Acquires that found the free slots still read by the GPU (a queued copy or
    kernel) and waited for it, or with ``timeout_s=0`` went without."""
    retired: int = 0
    """Slots taken out of use because no GPU fence could be recorded for them."""


class PoolCore:
    """The pool's state; its finalizer and lease callbacks hold this, never the pool.

    Invariant: every slot index is in exactly one of ``free``, ``acquired``, ``leased``,
    ``retired`` (until close, which empties them).

    With a ``guard`` (GPU memory modes), a slot the consumer drops is fenced on the
    consumer's stream before it goes back to ``free``; a free slot is handed out only
    once its fence has completed (see edgeload.cuda.memory.SlotGuard).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.cond = threading.Condition(threading.RLock())  # reentrant: GC may free a
        # leased view, and so run on_release, while this thread already holds it
        self.backings: list[Backing] = []
        self.arrays: list[np.ndarray] = []
        self.refs: list[SlotRef | None] = []
        self.views: list[tuple[int, int]] = []  # (backing index, byte offset) per slot
        self.free: list[int] = []
        self.acquired: set[int] = set()
        self.leased: dict[int, weakref.ref[np.ndarray]] = {}
        self.retired: set[int] = set()
        self.guard: Any = None
        self.lease_streams: dict[int, Any] = {}  # consumer's stream when each was leased
        self.closed = False

    def on_release(self, index: int) -> None:
        with self.cond:
            if self.leased.pop(index, None) is None or self.closed:
                return
            stream = self.lease_streams.pop(index, None)
            if self.guard is not None and not self.guard.fence(self.arrays[index], stream):
                self.retired.add(index)
                return
            self.free.append(index)
            self.cond.notify_all()

    def take_free(self) -> int | None:
        """Pop a free slot the GPU no longer reads (newest first), or None."""
        if self.guard is None:
            return self.free.pop() if self.free else None
        for position in range(len(self.free) - 1, -1, -1):
            if not self.guard.busy(self.arrays[self.free[position]]):
                return self.free.pop(position)
        return None

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.free.clear()
            self.acquired.clear()
            self.leased.clear()
            self.retired.clear()
            self.lease_streams.clear()
            self.arrays.clear()
            self.cond.notify_all()
            backings, self.backings = self.backings, []
        for backing in backings:
            backing.close()


class Releaser:
    """Weak-reference callback: the consumer dropped the last view of a slot."""

    __slots__ = ("_core", "_index")

    def __init__(self, core: PoolCore, index: int) -> None:
        self._core, self._index = core, index

    def __call__(self, _ref: object) -> None:
        self._core.on_release(self._index)
