"""Slot memory for the GPU modes (pinned, mapped, managed).

:func:`allocate_gpu_array` returns a flat uint8 numpy array whose ``base`` owns one
allocation (:class:`~edgeload.cuda._owner.SlotMemory`), so the slot pool slices, leases
and recycles it like host memory (:func:`gpu_allocator` is the pool's allocator for a
mode). The allocation is freed only when the last array or tensor viewing it is gone
*and* the GPU work recorded against it has finished.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import ArgumentError, PlatformError
from ..vocabulary import GPU_MEMORY_MODES, MemoryMode
from ._owner import find_owner

__all__ = [
    "CudaBacking",
    "allocate_gpu_array",
    "gpu_allocator",
    "memory_mode_of",
]


def _engine(engine: Any) -> Any:
    if engine is not None:
        return engine
    from .engine import default_engine

    return default_engine()


def allocate_gpu_array(
    mode: MemoryMode, nbytes: int, *, engine: Any = None
) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """Allocate ``nbytes`` of slot memory in a GPU mode, as a flat uint8 array.

    The array (and any view of it) keeps the allocation alive; the memory is
    page-aligned.

    Args:
        mode: ``"pinned"``, ``"mapped"`` or ``"managed"``.
        nbytes: size in bytes, > 0.
        engine: the GPU engine (default: CUDA through torch).

    Raises:
        ArgumentError: ``mode`` is not a GPU memory mode or ``nbytes`` is not positive.
        PlatformError: this machine cannot give ``mode`` (why, and which mode works).
    """
    if mode not in GPU_MEMORY_MODES:
        raise ArgumentError(
            f"allocate_gpu_array() makes GPU slot memory, one of {GPU_MEMORY_MODES}, got {mode!r}; "
            "host memory comes from edgeload.pipeline.slots"
        )
    if not isinstance(nbytes, int) or nbytes <= 0:
        raise ArgumentError(f"nbytes must be a positive int, got {nbytes!r}")
    chosen = _engine(engine)
    chosen.check_memory_mode(mode)
    return np.asarray(chosen.allocate_slot_memory(mode, nbytes))


class CudaBacking:
    """GPU-mode slot memory in the shape ``edgeload.pipeline.slots`` expects of an allocator.

    Args:
        mode: ``"pinned"``, ``"mapped"`` or ``"managed"``.
        nbytes: size in bytes.
        engine: the GPU engine (default: CUDA).

    Raises:
        ArgumentError, PlatformError: as allocate_gpu_array().
    """

    name: str | None = None
    shm_dir = ""

    def __init__(self, mode: MemoryMode, nbytes: int, *, engine: Any = None) -> None:
        self._array: np.ndarray[Any, Any] | None = allocate_gpu_array(mode, nbytes, engine=engine)
        self.buffer = self._array.data

    def close(self) -> None:
        """Drop the pool's hold; the memory goes once no view or queued GPU work uses it."""
        with contextlib.suppress(BufferError):
            self.buffer.release()
        self._array = None


def gpu_allocator(mode: MemoryMode, engine: Any = None) -> Callable[[int, bool, str], CudaBacking]:
    """The slot-pool allocator for a GPU memory mode (``register_memory_mode``'s second argument).

    Args:
        mode: ``"pinned"``, ``"mapped"`` or ``"managed"``.
        engine: the GPU engine (default: CUDA).
    """

    def gpu_backing(nbytes: int, shared: bool, shm_dir: str) -> CudaBacking:
        if shared:
            # GPU host allocations live in this process only; /dev/shm segments could be
            # registered with cudaHostRegister, but that is not built yet.
            raise PlatformError(
                f"memory_mode={mode!r} slots cannot be shared with worker processes "
                f"(shm_dir={shm_dir!r}); use thread workers (worker_kind='thread', which "
                "suits decoding) or memory_mode='host'"
            )
        return CudaBacking(mode, nbytes, engine=engine)

    return gpu_backing


def memory_mode_of(view: Any) -> MemoryMode:
    """The memory mode of the slot memory ``view`` lies in (``"host"`` for anything else).

    ``view`` may be a numpy array or a CPU torch tensor; the allocation is found by
    address, so views of views (a batch tensor over a pool view) are found too.
    """
    owner = find_owner(view)
    return "host" if owner is None else owner.mode  # type: ignore[return-value]
