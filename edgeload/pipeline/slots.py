"""Preallocated, page-aligned batch slots that workers write into in place.

A :class:`SlotPool` owns ``count`` slots of one shape and dtype. The producer side
``acquire``s a free slot, fills ``slot.array`` (a thread) or ``attach(slot.ref)`` (a
process, when ``shared=True``), then either ``lease``s it to the consumer or
``release``s it unused. ``lease`` returns a fresh numpy view of the slot: zero copies.

The lease rule: a leased slot is reused only when nothing refers to the view any more.
Each lease builds its view over a new buffer object that the pool tracks by weak
reference; numpy views and ``torch.from_numpy`` tensors keep it alive, so the slot
comes back exactly when the last of them goes. If the consumer keeps batches, the pool
grows within ``max_bytes``, then hands out copies (logged once) - it never overwrites.

Memory comes from an allocator chosen by ``mode`` (:func:`register_memory_mode` is the
seam for custom modes); ``host`` is page-aligned ``mmap`` memory, shared through
``/dev/shm`` when ``shared=True``. The GPU modes take their memory, and the GPU half of
the lease rule, from an engine (``edgeload.cuda.engine``): a batch the consumer drops
is fenced on the consumer's stream, and its slot is not handed to a producer until the
copy or kernel queued on it has completed (counted in ``stats().gpu_waits``).

The pool is the public face of two parts: the slots' memory (``_slot_memory.SlotStore``
and the allocators) and the lease bookkeeping, which slot is free, being filled or held
by the consumer (``_slot_core.PoolCore``, which the finalizer and weak-reference
callbacks hold instead of the pool).
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ClosedError
from ..vocabulary import MemoryMode
from ._shm import SHM_DIR, SlotRef, attach, check_shm_space
from ._slot_core import Backing, PoolCore, Slot, SlotStats
from ._slot_memory import PAGE_SIZE, SlotStore, allocate_backing, register_memory_mode
from ._slot_returns import collect

if TYPE_CHECKING:  # numpy.typing arrived in numpy 1.20; JetPack 5 ships 1.17
    import numpy.typing as npt

__all__ = [
    "PAGE_SIZE",
    "SHM_DIR",
    "Backing",
    "MemoryMode",
    "Slot",
    "SlotPool",
    "SlotRef",
    "SlotStats",
    "allocate_backing",
    "attach",
    "check_shm_space",
    "register_memory_mode",
]


class SlotPool:
    """A pool of preallocated, reusable slots of one shape and dtype.

    Args:
        shape: shape of one slot (e.g. ``(batch, H, W, 3)``).
        dtype: numpy dtype of a slot.
        count: slots to allocate up front (>= 1).
        max_bytes: the pool may grow up to this many bytes while the consumer keeps
            batches; None keeps it at ``count`` slots.
        mode: memory mode: ``"host"``; ``"pinned"``, ``"mapped"``, ``"managed"`` come
            with GPU support.
        shared: put slots in ``shm_dir`` so process workers can write them in place.
        name: used in messages.
        shm_dir: the shared-memory directory (tests point it at a small tmpfs).
        reserve: slots that always stay out of the consumer's hands, for the producers
            (1 .. count): a lease that would leave fewer grows the pool within
            ``max_bytes`` or is delivered as a copy. Set it to the number of slots the
            pipeline fills at once (open batches, in-flight tasks) when the consumer may
            keep batches.
        engine: the GPU engine of a GPU mode (default: CUDA through torch);
            ``edgeload.cuda.host_engine.HostEngine`` runs GPU modes on the CPU.

    Raises:
        ValueError: bad count, shape, dtype or a ``max_bytes`` below ``count`` slots.
        PlatformError: the mode is unavailable, or ``shm_dir`` is too small (the
            message names Docker's ``--shm-size``); callers may fall back to threads.
    """

    def __init__(
        self,
        shape: tuple[int, ...],
        dtype: npt.DTypeLike = np.uint8,
        *,
        count: int,
        max_bytes: int | None = None,
        mode: MemoryMode = "host",
        shared: bool = False,
        name: str = "slots",
        shm_dir: str = SHM_DIR,
        reserve: int = 1,
        engine: Any = None,
    ) -> None:
        if count < 1:
            raise ValueError(f"{name}: count must be >= 1, got {count}")
        if not 1 <= reserve <= count:
            raise ValueError(f"{name}: reserve must be between 1 and count={count}, got {reserve}")
        self.name, self.reserve = name, reserve
        self._core = PoolCore(name)
        self._store = store = SlotStore(
            self._core,
            shape,
            dtype,
            count=count,
            max_bytes=max_bytes,
            mode=mode,
            shared=shared,
            shm_dir=shm_dir,
            engine=engine,
        )
        self.shape, self.dtype, self.mode = store.shape, store.dtype, mode
        self.item_nbytes, self.slot_nbytes = store.item_nbytes, store.slot_nbytes
        self.shared, self.shm_dir, self.max_bytes = shared, shm_dir, max_bytes
        self._finalizer = weakref.finalize(self, self._core.close)

    def __enter__(self) -> SlotPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._core.closed

    @property
    def count(self) -> int:
        """Slots allocated now."""
        return self._store.count

    def _check_open(self, what: str) -> None:
        if self._core.closed:
            raise ClosedError(f"{self.name}: {what} after close()")

    def acquire(self, *, timeout_s: float | None = None) -> Slot:
        """Take a free slot for a producer to fill, growing within ``max_bytes``.

        Args:
            timeout_s: most seconds to wait for a free slot; None waits until one is
                free or the pool closes.

        Raises:
            ClosedError: the pool is closed (also while waiting).
            WaitTimeout: no slot came free within ``timeout_s`` (a TimeoutError).
        """
        return self._core.take(timeout_s, self._store.grow_one)

    def release(self, slot: Slot) -> None:
        """Give an acquired slot back unused (an error, a dropped item); no-op after close.

        Raises:
            ValueError: the slot is not currently acquired from this pool.
        """
        with self._core.lock:
            if not self._core.closed:
                self._core.give_back(slot.index)

    def lease(self, slot: Slot) -> np.ndarray:
        """Hand a filled slot to the consumer: a zero-copy view, or a copy if it kept all.

        The slot returns to the pool when the view and everything made from it (numpy
        views, ``torch.from_numpy`` tensors) are gone. ``reserve`` slots always stay out
        of the consumer's hands, so producers cannot starve: once the consumer holds all
        the others and ``max_bytes`` allows no more, batches arrive as copies (logged
        once). A plain ``for batch in loader`` loop holds the previous batch while the
        next is leased, so size ``count`` as workers + prefetch depth + 2 for zero copies.

        Raises:
            ClosedError: the pool is closed.
            ValueError: the slot is not currently acquired from this pool.
        """
        core = self._core
        with core.lock:
            self._check_open("lease()")
            collect(core)
            core.check_acquired(slot.index)
            while self._starves() and self._store.grow_one():
                pass
            if self._starves():
                return core.copy_out(slot.index, reserve=self.reserve, max_bytes=self.max_bytes)
            view = self._store.view(slot.index)
            core.lease(slot.index, view)
            return view

    def _starves(self) -> bool:
        """Whether one more lease would leave producers fewer than ``reserve`` slots."""
        return self.count - len(self._core.leased) - 1 < self.reserve

    def stats(self) -> SlotStats:
        """Return a snapshot of the pool's slot counts."""
        with self._core.lock:
            return self._core.snapshot(nbytes=self.count * self.slot_nbytes)

    def close(self) -> None:
        """Free the slots and unlink shared memory; idempotent.

        Batches the consumer still holds stay valid: their pages stay mapped until the
        last view goes.
        """
        self._finalizer()
