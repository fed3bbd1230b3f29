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
"""

from __future__ import annotations

import logging
import mmap
import time
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ArgumentError, ClosedError, WaitTimeout
from ..vocabulary import GPU_MEMORY_MODES, MemoryMode
from ._shm import SHM_DIR, HostMemory, SharedSegment, SlotRef, attach, check_shm_space
from ._slot_core import Allocator, Backing, PoolCore, Releaser, Slot, SlotStats
from .lifecycle import POLL_INTERVAL_S

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

_log = logging.getLogger("edgeload")

PAGE_SIZE = mmap.PAGESIZE


def _host_backing(nbytes: int, shared: bool, shm_dir: str) -> Backing:
    if shared:
        return SharedSegment(nbytes, shm_dir=shm_dir)
    return HostMemory(nbytes)


def _gpu(mode: MemoryMode, engine: Any = None) -> Allocator:
    def gpu_backing(nbytes: int, shared: bool, shm_dir: str) -> Backing:
        # Imported on use: only GPU pools need the CUDA runtime (edgeload.cuda.memory).
        from ..cuda.memory import gpu_allocator

        return gpu_allocator(mode, engine)(nbytes, shared, shm_dir)

    return gpu_backing


# Waiting for the GPU to finish with a slot polls faster than the pool's usual interval:
# a copy takes about a millisecond per megabyte.
_GPU_POLL_S = 0.002


_ALLOCATORS: dict[str, Allocator] = {
    "host": _host_backing,
    "pinned": _gpu("pinned"),
    "mapped": _gpu("mapped"),
    "managed": _gpu("managed"),
}


_CUSTOM: set[str] = set()


def register_memory_mode(mode: str, allocator: Allocator) -> None:
    """Install (or replace) the allocator behind memory ``mode`` (its pools get no GPU fences)."""
    _ALLOCATORS[mode] = allocator
    _CUSTOM.add(mode)


def allocate_backing(
    mode: str, nbytes: int, *, shared: bool = False, shm_dir: str = SHM_DIR
) -> Backing:
    """Allocate the memory behind ``nbytes`` of slots in memory ``mode``.

    Args:
        mode: a memory mode (``"host"``, a GPU mode, or one from ``register_memory_mode``).
        nbytes: size in bytes (>= 1).
        shared: a ``shm_dir`` segment that process workers can attach (host memory).
        shm_dir: the shared-memory directory.

    Raises:
        ArgumentError: unknown mode or ``nbytes`` < 1 (a ValueError).
        PlatformError: the mode is unavailable here, or ``shm_dir`` is too small.
    """
    if mode not in _ALLOCATORS:
        raise ArgumentError(
            f"memory mode must be one of {sorted(_ALLOCATORS)}, got {mode!r}; pass one of "
            "those or register it with register_memory_mode()"
        )
    if not isinstance(nbytes, int) or nbytes < 1:
        raise ArgumentError(f"slot memory must be an int of at least 1 byte, got {nbytes!r}")
    return _ALLOCATORS[mode](nbytes, shared, shm_dir)


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
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        if count < 1:
            raise ValueError(f"{name}: count must be >= 1, got {count}")
        if any(d < 0 for d in self.shape):
            raise ValueError(f"{name}: shape must have no negative sizes, got {shape}")
        self.item_nbytes = int(np.prod(self.shape)) * self.dtype.itemsize
        self.slot_nbytes = max(PAGE_SIZE, -(-self.item_nbytes // PAGE_SIZE) * PAGE_SIZE)
        if max_bytes is not None and max_bytes < count * self.slot_nbytes:
            raise ValueError(
                f"{name}: max_bytes={max_bytes} is below {count} slots of "
                f"{self.slot_nbytes} bytes; raise max_bytes or lower count"
            )
        self.name, self.mode, self.shared, self.shm_dir = name, mode, shared, shm_dir
        self.max_bytes = max_bytes
        if not 1 <= reserve <= count:
            raise ValueError(f"{name}: reserve must be between 1 and count={count}, got {reserve}")
        self.reserve = reserve
        self._copies = 0
        self._gpu_waits = 0
        self._core = PoolCore(name)
        self._allocator: Allocator | None = None
        if mode in GPU_MEMORY_MODES and (engine is not None or mode not in _CUSTOM):
            from ..cuda.engine import default_engine
            from ..cuda.memory import SlotGuard

            engine = engine if engine is not None else default_engine()
            self._allocator = _gpu(mode, engine)
            self._core.guard = SlotGuard(engine)
        if mode == "managed":
            # Attaching managed memory to a CUDA stream covers its whole allocation: on a
            # Jetson without I/O coherency, a CPU write into one slot while the GPU reads
            # another in the same allocation faults. One allocation per slot keeps them apart.
            for _ in range(count):
                self._grow(1)
        else:
            self._grow(count)
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
        return len(self._core.views)

    def _grow(self, count: int) -> None:
        """Allocate ``count`` more slots (cond held, or in __init__)."""
        core = self._core
        nbytes = count * self.slot_nbytes
        if self._allocator is not None:
            backing = self._allocator(nbytes, self.shared, self.shm_dir)
        else:
            backing = allocate_backing(self.mode, nbytes, shared=self.shared, shm_dir=self.shm_dir)
        core.backings.append(backing)
        for i in range(count):
            index, offset = len(core.views), i * self.slot_nbytes
            core.views.append((len(core.backings) - 1, offset))
            core.arrays.append(self._view(index))
            core.refs.append(
                None
                if backing.name is None
                else SlotRef(
                    backing.name, backing.shm_dir, offset, self.shape, self.dtype.str, index
                )
            )
            core.free.append(index)

    def _can_grow(self) -> bool:
        return self.max_bytes is not None and (self.count + 1) * self.slot_nbytes <= self.max_bytes

    def _starves(self, leased: int) -> bool:
        """Whether ``leased`` consumer-held slots leave producers fewer than ``reserve``."""
        return self.count - leased < self.reserve

    def _view(self, index: int) -> np.ndarray:
        backing_index, offset = self._core.views[index]
        buf = self._core.backings[backing_index].buffer[offset : offset + self.item_nbytes]
        return np.frombuffer(buf, dtype=self.dtype).reshape(self.shape)

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
        core = self._core
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        waited_for_gpu = False
        with core.cond:
            while True:
                self._check_open("acquire()")
                index = core.take_free()
                if index is not None:
                    core.acquired.add(index)
                    return Slot(index, core.arrays[index], core.refs[index])
                # Free slots the GPU still reads are waited for, not grown around: the
                # GPU is the bottleneck, and more memory would not make it faster.
                gpu_busy = bool(core.free)
                if gpu_busy and not waited_for_gpu:
                    waited_for_gpu = True
                    self._gpu_waits += 1
                if not gpu_busy and self._can_grow():
                    self._grow(1)
                    continue
                poll = _GPU_POLL_S if gpu_busy else POLL_INTERVAL_S
                left = poll if deadline is None else deadline - time.monotonic()
                if left <= 0:
                    raise WaitTimeout(
                        f"{self.name}: no free slot within {timeout_s} s ({self.count} "
                        f"slots: {len(core.acquired)} being filled, {len(core.leased)} held "
                        f"by the consumer, {len(core.free)} still read by the GPU); release "
                        "batches sooner or raise max_bytes"
                    )
                core.cond.wait(min(left, poll))

    def release(self, slot: Slot) -> None:
        """Give an acquired slot back unused (an error, a dropped item); no-op after close.

        Raises:
            ValueError: the slot is not currently acquired from this pool.
        """
        core = self._core
        with core.cond:
            if core.closed:
                return
            if slot.index not in core.acquired:
                raise ValueError(f"{self.name}: slot {slot.index} is not acquired")
            core.acquired.remove(slot.index)
            core.free.append(slot.index)
            core.cond.notify_all()

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
        with core.cond:
            self._check_open("lease()")
            if slot.index not in core.acquired:
                raise ValueError(f"{self.name}: slot {slot.index} is not acquired")
            while self._starves(len(core.leased) + 1) and self._can_grow():
                self._grow(1)
            if self._starves(len(core.leased) + 1):
                copy = core.arrays[slot.index].copy()
                core.acquired.remove(slot.index)
                core.free.append(slot.index)
                core.cond.notify_all()
                self._copies += 1
                if self._copies == 1:
                    _log.warning(
                        "edgeload: %s: the consumer keeps %d batches, every slot but the "
                        "%d kept for producers and all max_bytes=%s allow; later batches "
                        "are copies, not views. Drop batches sooner, or raise the prefetch "
                        "budget",
                        self.name,
                        len(core.leased),
                        self.reserve,
                        self.max_bytes,
                    )
                return copy
            view = self._view(slot.index)
            base = view.base
            if not isinstance(base, np.ndarray):  # pragma: no cover - numpy invariant
                raise TypeError("slot view has no ndarray base")
            core.acquired.remove(slot.index)
            if core.guard is not None:
                core.lease_streams[slot.index] = core.guard.consumer_stream()
            core.leased[slot.index] = weakref.ref(base, Releaser(core, slot.index))
            return view

    def stats(self) -> SlotStats:
        """Return a snapshot of the pool's slot counts."""
        core = self._core
        with core.cond:
            return SlotStats(
                count=self.count,
                free=len(core.free),
                acquired=len(core.acquired),
                leased=len(core.leased),
                copies=self._copies,
                nbytes=self.count * self.slot_nbytes,
                gpu_waits=self._gpu_waits,
                retired=len(core.retired),
            )

    def close(self) -> None:
        """Free the slots and unlink shared memory; idempotent.

        Batches the consumer still holds stay valid: their pages stay mapped until the
        last view goes.
        """
        self._finalizer()
