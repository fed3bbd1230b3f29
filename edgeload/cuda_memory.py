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

import logging
import threading
import time
import weakref
from typing import Any

import numpy as np

from . import _cuda
from ._deps import require_torch
from .errors import PlatformError, ProfileError
from .gpu import GPU_MEMORY_MODES, MemoryMode, check_memory_mode, cuda_device

__all__ = ["allocate", "as_cuda_tensor", "gpu_busy", "memory_mode_of", "record_gpu_use"]
__all__ += ["wait_gpu_idle"]

_log = logging.getLogger(__name__)
_POLL_S = 0.0005


class _Fences:
    """CUDA events, each covering a byte range of one allocation."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: list[tuple[int, int, Any]] = []

    def add(self, start: int, stop: int, event: Any) -> None:
        with self._lock:
            self._events = [e for e in self._events if not e[2].query()]
            self._events.append((start, stop, event))

    def busy(self, start: int, stop: int) -> bool:
        with self._lock:
            self._events = [e for e in self._events if not e[2].query()]
            return any(s < stop and start < e for s, e, _ in self._events)

    def drain(self) -> None:
        with self._lock:
            events, self._events = self._events, []
        for _, _, event in events:
            event.synchronize()


def _release(free: Any, ptr: int, fences: _Fences) -> None:
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
        self.fences = _Fences()
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
        ProfileError: ``mode`` is not a GPU memory mode or ``nbytes`` is not positive.
        PlatformError: this machine cannot give ``mode`` (why, and which mode works).
    """
    if mode not in GPU_MEMORY_MODES:
        raise ProfileError(
            f"allocate() makes GPU slot memory, one of {GPU_MEMORY_MODES}, got {mode!r}; "
            "host memory comes from edgeload.buffers"
        )
    if not isinstance(nbytes, int) or nbytes <= 0:
        raise ProfileError(f"nbytes must be a positive int, got {nbytes!r}")
    check_memory_mode(mode)
    return np.asarray(_CudaMemory(mode, nbytes))


def _owner(array: np.ndarray[Any, Any]) -> _CudaMemory | None:
    base: object = array
    while isinstance(base, np.ndarray):
        base = base.base
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
    low = sum((n - 1) * s for n, s in zip(array.shape, array.strides, strict=True) if s < 0)
    high = sum((n - 1) * s for n, s in zip(array.shape, array.strides, strict=True) if s > 0)
    return start + low, start + high + array.itemsize


def record_gpu_use(array: np.ndarray[Any, Any], *, stream: Any = None) -> bool:
    """Fence ``array``'s bytes: they count as in use until ``stream``'s queued work is done.

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
        time.sleep(_POLL_S)
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
        ProfileError: ``array`` is host or pinned memory, which the GPU cannot read
            in place; copy it with edgeload.transfer.DeviceCopier instead.
    """
    owner = _owner(array)
    if owner is None or owner.mode == "pinned":
        mode = "host" if owner is None else owner.mode
        raise ProfileError(
            f"as_cuda_tensor() needs mapped or managed slot memory, got {mode!r} memory; "
            "copy it to the GPU with edgeload.transfer.DeviceCopier (or use "
            "memory_mode='mapped')"
        )
    torch = require_torch()
    stream = torch.cuda.current_stream()
    if owner.attach_per_stream:
        _cuda.load_cudart().stream_attach(stream.cuda_stream, owner.host_ptr, to_host=False)
    return torch.as_tensor(_CudaView(array, owner, stream), device=device or "cuda")
