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

The module holds the pool's parts in that order. The types (:class:`Slot`,
:class:`SlotStats`, the allocator's :class:`Backing`); the lease bookkeeping, which slot
is free, being filled or held by the consumer (:class:`PoolCore`, which the finalizer and
weak-reference callbacks hold instead of the pool); how a leased slot comes back when the
consumer drops the last view of it (:func:`on_drop`, :func:`collect`); the slots' memory
(the allocators and :class:`SlotStore`); and :class:`SlotPool`, the public face.

A leased slot is tracked by a weak reference to its view's buffer. When that buffer
dies, a callback wakes a waiting producer (a host slot), or fences and frees the slot
(a GPU slot); :func:`collect` takes back every slot whose reference is dead, so a
wake-up lost to Ctrl-C loses no slot. All of it works on the pool's :class:`PoolCore`,
never on the pool.
"""

from __future__ import annotations

import dataclasses
import logging
import mmap
import numbers
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Callable, Protocol

import numpy as np

from .. import _args
from ..errors import ArgumentError, ClosedError, WaitTimeout
from ..vocabulary import GPU_MEMORY_MODES, MemoryMode
from ._lifecycle import POLL_INTERVAL_S, Wakeups
from ._malloc import prime_malloc
from ._shm import SHM_DIR, HostMemory, SharedSegment, SlotRef, attach, check_shm_space

if TYPE_CHECKING:  # numpy.typing arrived in numpy 1.20; JetPack 5 ships 1.17
    import numpy.typing as npt

    from ..cuda.engine import Engine

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
    once its fence has completed (see edgeload.cuda._lease.SlotGuard).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        # Reentrant: GC may free a leased GPU view, and so run its Releaser, while this
        # thread already holds it. A plain lock, not a Condition: the consumer's main
        # thread takes it, and Condition.__enter__/__exit__ are Python code where Ctrl-C
        # could leave it held for good. Producers wait on ``returned``.
        self.lock = threading.RLock()
        self.backings: list[Backing] = []
        self.arrays: list[np.ndarray] = []
        self.refs: list[SlotRef | None] = []
        self.views: list[tuple[int, int]] = []  # (backing index, byte offset) per slot
        self.free: list[int] = []
        self.acquired: set[int] = set()
        self.leased: dict[int, weakref.ref[np.ndarray]] = {}
        self.retired: set[int] = set()
        self.guard: Any = None  # a GPU mode's SlotGuard (edgeload.cuda._lease)
        self.copies = 0  # leases delivered as copies (SlotStats.copies)
        self.gpu_waits = 0  # acquires that waited for the GPU (SlotStats.gpu_waits)
        self.closed = False
        self.returned = Wakeups()  # a slot came back: a dropped view, a release

    def check_acquired(self, index: int) -> None:
        """Raise ArgumentError (a ValueError) unless slot ``index`` is acquired (lock held)."""
        if index not in self.acquired:
            raise ArgumentError(
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


# How a leased slot comes back to its pool (see the module docstring).


def on_drop(core: PoolCore, index: int) -> Callable[[Any], object]:
    """The weak-reference callback for a leased view of slot ``index``.

    It runs in whichever thread drops the last reference, usually the consumer's main
    thread, and any Python code there is a point where Ctrl-C's KeyboardInterrupt can
    be raised; raised inside a weakref callback, it is printed as "Exception ignored"
    and lost, and the program runs on. So a host slot's callback is C code
    only, ``SimpleQueue.put``: it wakes a waiting producer, and ``collect`` takes the
    slot back. A GPU slot is fenced on the dropping thread's stream, which needs Python.
    """
    return Releaser(core, index) if core.guard is not None else core.returned.post


class Releaser:
    """Weak-reference callback of a GPU slot: the consumer dropped its last view."""

    __slots__ = ("_core", "_index")

    def __init__(self, core: PoolCore, index: int) -> None:
        self._core, self._index = core, index

    def __call__(self, _ref: object) -> None:
        core = self._core
        with core.lock:
            if _take_back(core, self._index):
                core.returned.post(None)


def collect(core: PoolCore) -> None:
    """Take back the slots whose views are gone (``core.lock`` held).

    The dead weak reference is the record, not the wake-up on ``returned``, so a
    wake-up lost to an interrupt loses no slot.
    """
    core.returned.clear()
    for index in [i for i, ref in core.leased.items() if ref() is None]:
        _take_back(core, index)


def _take_back(core: PoolCore, index: int) -> bool:
    """Slot ``index``'s view is gone: free it (or retire it); whether it is free."""
    if core.leased.pop(index, None) is None or core.closed:
        return False
    if core.guard is not None and not core.guard.fence(index, core.arrays[index]):
        core.retired.add(index)
        return False
    core.free.append(index)
    return True


# Where slot memory comes from.

PAGE_SIZE = mmap.PAGESIZE


def _host_backing(nbytes: int, shared: bool, shm_dir: str) -> Backing:
    if shared:
        return SharedSegment(nbytes, shm_dir=shm_dir)
    return HostMemory(nbytes)


def _gpu(mode: MemoryMode, engine: Engine | None = None) -> Allocator:
    def gpu_backing(nbytes: int, shared: bool, shm_dir: str) -> Backing:
        # Imported on use: only GPU pools need the CUDA runtime (edgeload.cuda.memory).
        from ..cuda.memory import gpu_allocator

        return gpu_allocator(mode, engine)(nbytes, shared, shm_dir)

    return gpu_backing


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


class SlotStore:
    """The memory of one pool's slots: their shape, where each lives, and growing them.

    Each new slot goes into ``core`` (its array, its ``SlotRef`` when shared, and its
    index in ``free``); slots are never freed one by one, only all at once when the
    core closes. For a GPU mode the store installs the engine's fences as
    ``core.guard``. Arguments are as :class:`~edgeload.pipeline.slots.SlotPool`'s
    (which has checked ``count``).
    """

    def __init__(
        self,
        core: PoolCore,
        shape: tuple[int, ...],
        dtype: npt.DTypeLike,
        *,
        count: int,
        max_bytes: int | None,
        mode: MemoryMode,
        shared: bool,
        shm_dir: str,
        engine: Engine | None,
    ) -> None:
        name = core.name
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        if any(d < 0 for d in self.shape):
            raise ArgumentError(f"{name}: shape must have no negative sizes, got {shape}")
        self.item_nbytes = int(np.prod(self.shape)) * self.dtype.itemsize
        self.slot_nbytes = max(PAGE_SIZE, -(-self.item_nbytes // PAGE_SIZE) * PAGE_SIZE)
        if max_bytes is not None and max_bytes < count * self.slot_nbytes:
            raise ArgumentError(
                f"{name}: max_bytes={max_bytes} is below {count} slots of "
                f"{self.slot_nbytes} bytes; raise max_bytes or lower count"
            )
        self.mode, self.shared, self.shm_dir, self.max_bytes = mode, shared, shm_dir, max_bytes
        self._core = core
        self._allocator: Allocator | None = None
        if mode in GPU_MEMORY_MODES and (engine is not None or mode not in _CUSTOM):
            from ..cuda._lease import SlotGuard
            from ..cuda.engine import default_engine

            engine = engine if engine is not None else default_engine()
            self._allocator = _gpu(mode, engine)
            core.guard = SlotGuard(engine)
        if mode == "managed":
            # Attaching managed memory to a CUDA stream covers its whole allocation: on a
            # Jetson without I/O coherency, a CPU write into one slot while the GPU reads
            # another in the same allocation faults. One allocation per slot keeps them apart.
            for _ in range(count):
                self.grow(1)
        else:
            self.grow(count)

    @property
    def count(self) -> int:
        """Slots allocated now."""
        return len(self._core.views)

    def grow_one(self) -> bool:
        """Add one slot if it fits within ``max_bytes``; whether it did (core's lock held)."""
        if self.max_bytes is None or (self.count + 1) * self.slot_nbytes > self.max_bytes:
            return False
        self.grow(1)
        return True

    def grow(self, count: int) -> None:
        """Allocate ``count`` more slots, all free (core's lock held, or before use)."""
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
            core.arrays.append(self.view(index))
            core.refs.append(
                None
                if backing.name is None
                else SlotRef(
                    backing.name, backing.shm_dir, offset, self.shape, self.dtype.str, index
                )
            )
            core.free.append(index)

    def view(self, index: int) -> np.ndarray:
        """A new array over slot ``index`` (a fresh buffer object each call)."""
        backing_index, offset = self._core.views[index]
        buf = self._core.backings[backing_index].buffer[offset : offset + self.item_nbytes]
        return np.frombuffer(buf, dtype=self.dtype).reshape(self.shape)


def _check_shape(name: str, shape: object) -> tuple[int, ...]:
    if isinstance(shape, numbers.Integral) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)) or not all(
        isinstance(d, numbers.Integral) and not isinstance(d, bool) for d in shape
    ):
        raise ArgumentError(f"{name}: shape must be a tuple of ints, got {shape!r}")
    return tuple(int(d) for d in shape)


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
            (0 .. count): a lease that would leave fewer grows the pool within
            ``max_bytes`` or is delivered as a copy. Set it to the number of slots the
            pipeline fills at once (open batches, in-flight tasks) when the consumer may
            keep batches and producers wait for a slot; 0 when they never wait (they
            take a slot with ``timeout_s=0`` and go without one when none is free, as
            the DataLoader's tasks do): then every lease is a view.
        engine: the GPU engine of a GPU mode (default: CUDA through torch);
            ``edgeload.cuda.host_engine.HostEngine`` runs GPU modes on the CPU.

    Raises:
        ArgumentError: bad count, shape, dtype, reserve or a ``max_bytes`` below
            ``count`` slots (a ValueError); ``mode`` is accepted in any case.
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
        engine: Engine | None = None,
    ) -> None:
        count = _args.integer(name, "count", count, low=1)
        reserve = _args.integer(name, "reserve", reserve)
        if not 0 <= reserve <= count:
            raise ArgumentError(
                f"{name}: reserve must be between 0 and count={count}, got {reserve}"
            )
        max_bytes = _args.integer(name, "max_bytes", max_bytes, low=1, none_ok=True)
        shared = _args.flag(name, "shared", shared)
        if isinstance(mode, str):  # registered modes are checked where they are allocated
            mode = mode.lower()  # type: ignore[assignment]
        shape = _check_shape(name, shape)
        try:
            dtype = np.dtype(dtype)
        except TypeError as exc:
            raise ArgumentError(f"{name}: dtype {dtype!r} is not a numpy dtype ({exc})") from exc
        self.name, self.reserve = name, reserve
        prime_malloc()  # this process's batches will not go through malloc: see _malloc
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
