"""Where slot memory comes from: the allocator behind each memory mode, and a pool's slots.

:func:`allocate_backing` picks the allocator for a mode (:func:`register_memory_mode` is
the seam for custom modes). ``host`` is page-aligned ``mmap`` memory, a ``/dev/shm``
segment when shared; the GPU modes take theirs from an engine (``edgeload.cuda``).
:class:`SlotStore` lays one pool's slots out in that memory and grows them.
"""

from __future__ import annotations

import mmap
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ArgumentError
from ..vocabulary import GPU_MEMORY_MODES, MemoryMode
from ._shm import SHM_DIR, HostMemory, SharedSegment, SlotRef
from ._slot_core import Allocator, Backing, PoolCore

if TYPE_CHECKING:  # numpy.typing arrived in numpy 1.20; JetPack 5 ships 1.17
    import numpy.typing as npt

__all__ = ["PAGE_SIZE", "SlotStore", "allocate_backing", "register_memory_mode"]

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
        engine: Any,
    ) -> None:
        name = core.name
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        if any(d < 0 for d in self.shape):
            raise ValueError(f"{name}: shape must have no negative sizes, got {shape}")
        self.item_nbytes = int(np.prod(self.shape)) * self.dtype.itemsize
        self.slot_nbytes = max(PAGE_SIZE, -(-self.item_nbytes // PAGE_SIZE) * PAGE_SIZE)
        if max_bytes is not None and max_bytes < count * self.slot_nbytes:
            raise ValueError(
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
