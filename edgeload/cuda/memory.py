"""Slot memory for the GPU modes (pinned, mapped, managed) and the fences that guard it.

:func:`allocate` returns a flat uint8 numpy array whose ``base`` owns one CUDA
allocation, so the slot pool slices, leases and recycles it like host memory. The
allocation is freed only when the last array or tensor viewing it is gone *and* the
GPU work recorded against it has finished.

The lease rule gains a GPU half: a slot is not rewritten while GPU work that reads it
is still queued. Whoever queues such work records a fence (a CUDA event) on the
slot's bytes with :func:`record_gpu_use`; the pool asks :func:`gpu_busy` (or waits
with :func:`wait_gpu_idle`) before it lets a worker write the slot again. A tensor from
:func:`as_cuda_tensor` records its fence by itself when it dies, on the stream current
in the thread that drops it, which is where the model used it.
"""

from __future__ import annotations

import contextlib
import logging
import time
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from .._compat import zip_strict
from .._deps import require_torch
from ..errors import ArgumentError, PlatformError
from ..vocabulary import GPU_MEMORY_MODES, MemoryMode
from . import _runtime as _cuda
from ._fences import POLL_S, Fences, hold_until_done
from .status import check_memory_mode, cuda_device

__all__ = [
    "CudaBacking",
    "allocate",
    "as_cuda_tensor",
    "gpu_allocator",
    "gpu_busy",
    "memory_mode_of",
    "record_gpu_use",
    "wait_gpu_idle",
]

_log = logging.getLogger(__name__)


def _release(free: Any, ptr: int, fences: Fences) -> None:
    # Runs once nothing views the memory; the GPU may still be reading it.
    try:
        fences.drain()
        free(ptr)
    except Exception as exc:  # at interpreter exit the runtime may already be gone
        _log.debug("edgeload: freeing CUDA memory at %#x failed: %s", ptr, exc)


class _CudaMemory:
    """One CUDA allocation, exposed to numpy through ``__array_interface__``."""

    def __init__(self, mode: MemoryMode, nbytes: int) -> None:
        runtime = _cuda.load_cudart()
        self.mode = mode
        self.nbytes = nbytes
        self.fences = Fences()
        # On Jetsons the CPU may not touch globally attached managed memory while any
        # kernel runs, so there it stays host-attached and streams claim it per use.
        self.attach_per_stream = False
        if mode == "managed":
            self.attach_per_stream = not cuda_device().concurrent_managed_access
            self.host_ptr = runtime.malloc_managed(nbytes, attach_global=not self.attach_per_stream)
            self.device_ptr = self.host_ptr
            free = runtime.free
        else:
            self.host_ptr = runtime.host_alloc(nbytes, mapped=mode == "mapped")
            free = runtime.free_host
            try:
                self.device_ptr = (
                    runtime.host_device_pointer(self.host_ptr) if mode == "mapped" else 0
                )
            except PlatformError:
                runtime.free_host(self.host_ptr)
                raise
        self._finalizer = weakref.finalize(self, _release, free, self.host_ptr, self.fences)

    @property
    def __array_interface__(self) -> dict[str, Any]:
        return {
            "shape": (self.nbytes,),
            "typestr": "|u1",
            "data": (self.host_ptr, False),
            "version": 3,
        }


def allocate(mode: MemoryMode, nbytes: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """Allocate ``nbytes`` of slot memory in a GPU mode, as a flat uint8 array.

    The array (and any view of it) keeps the CUDA allocation alive; the memory is
    page-aligned.

    Args:
        mode: ``"pinned"``, ``"mapped"`` or ``"managed"``.
        nbytes: size in bytes, > 0.

    Raises:
        ArgumentError: ``mode`` is not a GPU memory mode or ``nbytes`` is not positive.
        PlatformError: this machine cannot give ``mode`` (why, and which mode works).
    """
    if mode not in GPU_MEMORY_MODES:
        raise ArgumentError(
            f"allocate() makes GPU slot memory, one of {GPU_MEMORY_MODES}, got {mode!r}; "
            "host memory comes from edgeload.pipeline.slots"
        )
    if not isinstance(nbytes, int) or nbytes <= 0:
        raise ArgumentError(f"nbytes must be a positive int, got {nbytes!r}")
    check_memory_mode(mode)
    return np.asarray(_CudaMemory(mode, nbytes))


class CudaBacking:
    """GPU-mode slot memory in the shape ``edgeload.pipeline.slots`` expects of an allocator.

    Args:
        mode: ``"pinned"``, ``"mapped"`` or ``"managed"``.
        nbytes: size in bytes.

    Raises:
        ArgumentError, PlatformError: as allocate().
    """

    name: str | None = None
    shm_dir = ""

    def __init__(self, mode: MemoryMode, nbytes: int) -> None:
        self._array: np.ndarray[Any, Any] | None = allocate(mode, nbytes)
        self.buffer = self._array.data

    def close(self) -> None:
        """Drop the pool's hold; the memory goes once no view or queued GPU work uses it."""
        with contextlib.suppress(BufferError):
            self.buffer.release()
        self._array = None


def gpu_allocator(mode: MemoryMode) -> Callable[[int, bool, str], CudaBacking]:
    """The slot-pool allocator for a GPU memory mode (``register_memory_mode``'s second argument).

    Args:
        mode: ``"pinned"``, ``"mapped"`` or ``"managed"``.
    """

    def allocate_slots(nbytes: int, shared: bool, shm_dir: str) -> CudaBacking:
        if shared:
            # CUDA host allocations live in this process only; /dev/shm segments could be
            # registered with cudaHostRegister, but that is not built yet.
            raise PlatformError(
                f"memory_mode={mode!r} slots cannot be shared with worker processes "
                f"(shm_dir={shm_dir!r}); use thread workers (worker_kind='thread', which "
                "suits decoding) or memory_mode='host'"
            )
        return CudaBacking(mode, nbytes)

    return allocate_slots


def _owner(array: np.ndarray[Any, Any]) -> _CudaMemory | None:
    # Pool views are np.frombuffer() over a memoryview of the flat array: follow both.
    base: object = array
    while isinstance(base, (np.ndarray, memoryview)):
        base = base.base if isinstance(base, np.ndarray) else base.obj
    return base if isinstance(base, _CudaMemory) else None


def memory_mode_of(array: np.ndarray[Any, Any]) -> MemoryMode:
    """The memory mode of the slot memory ``array`` views (``"host"`` for plain numpy)."""
    owner = _owner(array)
    return "host" if owner is None else owner.mode


def _byte_range(array: np.ndarray[Any, Any], owner: _CudaMemory) -> tuple[int, int]:
    # numpy's byte_bounds moved between 1.x and 2.x; the arithmetic is short.
    start = int(array.__array_interface__["data"][0]) - owner.host_ptr
    if array.size == 0:
        return start, start
    low = sum((n - 1) * s for n, s in zip_strict(array.shape, array.strides) if s < 0)
    high = sum((n - 1) * s for n, s in zip_strict(array.shape, array.strides) if s > 0)
    return start + low, start + high + array.itemsize


def record_gpu_use(array: np.ndarray[Any, Any], *, stream: Any = None) -> bool:
    """Fence ``array``'s bytes: they count as in use until ``stream``'s queued work is done.

    Until then ``array`` itself is kept alive, so a slot pool that recycles a slot when
    its last view goes cannot hand the slot to a producer early.

    Args:
        array: a view of GPU slot memory (from allocate()).
        stream: a ``torch.cuda.Stream``; default the current stream.

    Returns:
        False, doing nothing, when ``array`` is host memory.
    """
    owner = _owner(array)
    if owner is None:
        return False
    torch = require_torch()
    event = torch.cuda.Event()
    event.record(stream if stream is not None else torch.cuda.current_stream())
    owner.fences.add(*_byte_range(array, owner), event)
    hold_until_done(event, array)
    return True


def gpu_busy(array: np.ndarray[Any, Any]) -> bool:
    """Whether GPU work fenced on any of ``array``'s bytes is still queued or running."""
    owner = _owner(array)
    return owner is not None and owner.fences.busy(*_byte_range(array, owner))


def wait_gpu_idle(array: np.ndarray[Any, Any], *, timeout_s: float) -> bool:
    """Wait until gpu_busy(array) is false; False if ``timeout_s`` passed first."""
    deadline = time.monotonic() + timeout_s
    while gpu_busy(array):
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)
    return True


class _CudaView:
    """A CUDA array interface over a host view of mapped or managed memory.

    It holds ``array`` (so the slot's lease lasts as long as the tensor) and, when the
    tensor dies, fences the bytes on the stream the model used.
    """

    def __init__(self, array: np.ndarray[Any, Any], owner: _CudaMemory, stream: Any) -> None:
        self._array = array
        self._owner = owner
        self._stream = stream
        offset = int(array.__array_interface__["data"][0]) - owner.host_ptr
        self.__cuda_array_interface__ = {
            "shape": array.shape,
            "typestr": array.dtype.str,
            "strides": array.strides if not array.flags.c_contiguous else None,
            "data": (owner.device_ptr + offset, array.flags.writeable is False),
            "version": 3,
            # The CPU finished writing before the view was made: nothing to wait for.
            "stream": None,
        }

    def __del__(self) -> None:
        try:
            torch = require_torch()
            stream = torch.cuda.current_stream()
            if self._owner.attach_per_stream:
                runtime = _cuda.load_cudart()
                runtime.stream_attach(self._stream.cuda_stream, self._owner.host_ptr, to_host=True)
                stream = self._stream
            record_gpu_use(self._array, stream=stream)
        except Exception as exc:  # a finaliser must not raise; the slot then waits for a sync
            _log.warning("edgeload: could not fence slot memory after GPU use: %s", exc)


def as_cuda_tensor(array: np.ndarray[Any, Any], *, device: Any = None) -> Any:
    """View mapped or managed slot memory as a CUDA tensor, with no copy.

    The GPU reads the very bytes the CPU wrote into ``array``. The tensor keeps
    ``array`` (and so the slot's lease) alive; when it dies, the GPU work queued on it
    is fenced (see record_gpu_use()).

    Args:
        array: a view of memory from allocate("mapped") or allocate("managed").
        device: the torch CUDA device; default the current one.

    Raises:
        ArgumentError: ``array`` is host or pinned memory, which the GPU cannot read
            in place; copy it with edgeload.cuda.transfer.DeviceCopier instead.
    """
    owner = _owner(array)
    if owner is None or owner.mode == "pinned":
        mode = "host" if owner is None else owner.mode
        raise ArgumentError(
            f"as_cuda_tensor() needs mapped or managed slot memory, got {mode!r} memory; "
            "copy it to the GPU with edgeload.cuda.transfer.DeviceCopier (or use "
            "memory_mode='mapped')"
        )
    torch = require_torch()
    stream = torch.cuda.current_stream()
    if owner.attach_per_stream:
        _cuda.load_cudart().stream_attach(stream.cuda_stream, owner.host_ptr, to_host=False)
    # An index-less "cuda" would not match the view's cuda:N and could make as_tensor copy.
    target = (
        torch.device(device) if device is not None else torch.device("cuda", stream.device_index)
    )
    return torch.as_tensor(_CudaView(array, owner, stream), device=target)
