"""The slot pool's types and its lease bookkeeping: which slot is where.

Kept apart from :mod:`edgeload.pipeline.slots` so the pool's finalizer and the weak-reference
callbacks hold this state and never the pool itself. How a leased slot comes back is
:mod:`._slot_returns`.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import weakref
from typing import Any, Callable, Protocol

import numpy as np

from ..errors import ClosedError, WaitTimeout
from ._lifecycle import POLL_INTERVAL_S, Wakeups
from ._shm import SlotRef
from ._slot_returns import collect, on_drop

__all__ = ["Allocator", "Backing", "PoolCore", "Slot", "SlotStats"]

_log = logging.getLogger("edgeload")

# Waiting for the GPU to finish with a slot polls faster than the pool's usual interval:
# a copy takes about a millisecond per megabyte.
_GPU_POLL_S = 0.002


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
    once its fence has completed (see edgeload.cuda.gpu_use.SlotGuard).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        # Reentrant: GC may free a leased GPU view, and so run its Releaser, while this
        # thread already holds it. A plain lock, not a Condition: the consumer's main
        # thread takes it, and Condition.__enter__/__exit__ are Python code where Ctrl-C
        # could leave it held for good (issue #13). Producers wait on ``returned``.
        self.lock = threading.RLock()
        self.backings: list[Backing] = []
        self.arrays: list[np.ndarray] = []
        self.refs: list[SlotRef | None] = []
        self.views: list[tuple[int, int]] = []  # (backing index, byte offset) per slot
        self.free: list[int] = []
        self.acquired: set[int] = set()
        self.leased: dict[int, weakref.ref[np.ndarray]] = {}
        self.retired: set[int] = set()
        self.guard: Any = None  # a GPU mode's SlotGuard (edgeload.cuda.gpu_use)
        self.copies = 0  # leases delivered as copies (SlotStats.copies)
        self.gpu_waits = 0  # acquires that waited for the GPU (SlotStats.gpu_waits)
        self.closed = False
        self.returned = Wakeups()  # a slot came back: a dropped view, a release

    def check_acquired(self, index: int) -> None:
        """Raise ValueError unless slot ``index`` is acquired (lock held)."""
        if index not in self.acquired:
            raise ValueError(
                f"{self.name}: slot {index} is not acquired; pass a slot from acquire() "
                "that was not released or leased since"
            )

    def give_back(self, index: int) -> None:
        """An acquired slot goes back to ``free`` (lock held)."""
        self.check_acquired(index)
        self.acquired.remove(index)
        self.free.append(index)
        self.returned.post(None)

    def take(self, timeout_s: float | None, grow_one: Callable[[], bool]) -> Slot:
        """Move a free slot to ``acquired`` and return it, waiting up to ``timeout_s``.

        With no free slot, ``grow_one()`` (called with the lock held) may add one; free
        slots the GPU still reads are waited for instead. Call without the lock: the
        wait is outside it, on ``returned``.

        Raises:
            ClosedError: the pool closed (also while waiting).
            WaitTimeout: no slot came free in time.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        waited_for_gpu = False
        while True:
            with self.lock:
                if self.closed:
                    raise ClosedError(f"{self.name}: acquire() after close()")
                collect(self)
                index = self.take_free()
                if index is not None:
                    self.acquired.add(index)
                    return Slot(index, self.arrays[index], self.refs[index])
                # Free slots the GPU still reads are waited for, not grown around: the
                # GPU is the bottleneck, and more memory would not make it faster.
                gpu_busy = bool(self.free)
                if gpu_busy and not waited_for_gpu:
                    waited_for_gpu = True
                    self.gpu_waits += 1
                if not gpu_busy and grow_one():
                    continue
                poll = _GPU_POLL_S if gpu_busy else POLL_INTERVAL_S
                left = poll if deadline is None else deadline - time.monotonic()
                if left <= 0:
                    raise _no_free_slot(self, timeout_s)
            self.returned.wait(min(left, poll))

    def lease(self, index: int, view: np.ndarray) -> None:
        """Slot ``index`` is ``leased`` until ``view``'s buffer dies (lock held)."""
        base = view.base
        if not isinstance(base, np.ndarray):  # pragma: no cover - numpy invariant
            raise TypeError("slot view has no ndarray base")
        self.acquired.remove(index)
        if self.guard is not None:
            self.guard.lease(index)
        self.leased[index] = weakref.ref(base, on_drop(self, index))

    def copy_out(self, index: int, *, reserve: int, max_bytes: int | None) -> np.ndarray:
        """Deliver acquired slot ``index`` as a copy and free it at once (lock held)."""
        copy = self.arrays[index].copy()
        self.give_back(index)
        self.copies += 1
        if self.copies == 1:
            _log.warning(
                "edgeload: %s: the consumer keeps %d batches, every slot but the %d kept "
                "for producers and all max_bytes=%s allow; later batches are copies, not "
                "views. Drop batches sooner, or raise the prefetch budget",
                self.name,
                len(self.leased),
                reserve,
                max_bytes,
            )
        return copy

    def snapshot(self, *, nbytes: int) -> SlotStats:
        """The slot counts now (lock held)."""
        collect(self)
        return SlotStats(
            count=len(self.views),
            free=len(self.free),
            acquired=len(self.acquired),
            leased=len(self.leased),
            copies=self.copies,
            nbytes=nbytes,
            gpu_waits=self.gpu_waits,
            retired=len(self.retired),
        )

    def take_free(self) -> int | None:
        """Pop a free slot the GPU no longer reads (newest first), or None."""
        if self.guard is None:
            return self.free.pop() if self.free else None
        index: int | None = self.guard.pop_idle(self.free, self.arrays)
        return index

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.free.clear()
            self.acquired.clear()
            self.leased.clear()
            self.retired.clear()
            if self.guard is not None:
                self.guard.forget()
            self.arrays.clear()
            self.returned.post(None)
            backings, self.backings = self.backings, []
        for backing in backings:
            backing.close()


def _no_free_slot(core: PoolCore, timeout_s: float | None) -> WaitTimeout:
    """The error for an acquire that found no free slot in time: where the slots are."""
    return WaitTimeout(
        f"{core.name}: no free slot within {timeout_s} s ({len(core.views)} slots: "
        f"{len(core.acquired)} being filled, {len(core.leased)} held by the consumer, "
        f"{len(core.free)} still read by the GPU); release batches sooner or raise max_bytes"
    )
