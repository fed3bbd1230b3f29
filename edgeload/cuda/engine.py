"""The GPU as the slot code sees it: allocations, streams, events and copies.

Everything in edgeload that touches the GPU (slot memory, fences, transfers, both
loaders' ``device=`` / ``pin_memory`` paths) goes through one engine object:

- :class:`CudaEngine` (the default) is torch's CUDA plus the few runtime calls torch
  lacks (:mod:`edgeload.cuda._runtime`).
- :class:`~edgeload.cuda.host_engine.HostEngine` runs the same calls on the CPU: copies
  happen on a background thread after a delay the caller sets, and events and streams
  complete in order. Tests pass it as ``engine=`` to prove the lease rule (no slot is
  rewritten while a copy that reads it is queued) on machines without a GPU.

An engine has these members (duck-typed, see :class:`Engine`); streams have
``wait_event(event)`` and ``synchronize()``, events ``record(stream)``, ``query()``
and ``synchronize()``.
"""

from __future__ import annotations

import collections
import logging
import threading
import weakref
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol

from .._deps import require_torch
from ..errors import PlatformError
from . import _runtime as _cuda
from ._lease import Fences, SlotMemory, find_owner
from .status import CudaStatus, check_memory_mode, cuda_device, cuda_status

__all__ = [
    "COPY_KINDS",
    "CudaEngine",
    "Engine",
    "allocate_cuda_slot_memory",
    "default_engine",
    "device_error",
]

_log = logging.getLogger(__name__)

COPY_KINDS = ("h2d_async", "h2d_pageable", "pin")
"""Full copies an engine counts: an async copy from page-locked memory, a copy from
pageable memory (the CPU waits for it), and a copy into page-locked memory (pin)."""


class Engine(Protocol):
    """What the GPU-mode code needs of a GPU."""

    name: str

    def status(self) -> CudaStatus: ...
    def check_memory_mode(self, mode: str) -> None: ...
    def check_device(self, device: Any) -> Any: ...
    def allocate_slot_memory(self, mode: str, nbytes: int) -> SlotMemory: ...
    def current_stream(self) -> Any: ...
    def new_stream(self, device: Any = None) -> Any: ...
    def use_stream(self, stream: Any) -> AbstractContextManager[Any]: ...
    def new_event(self) -> Any: ...
    def is_legacy_stream(self, stream: Any) -> bool: ...
    def attach(self, owner: SlotMemory, stream: Any, *, mode: str) -> None: ...
    def view(self, interface: Any, device: Any) -> Any: ...
    def to_device(self, tensor: Any, device: Any, *, non_blocking: bool) -> Any: ...
    def pin(self, tensor: Any) -> Any: ...
    def is_device_tensor(self, value: Any) -> bool: ...
    def record_stream(self, tensor: Any, stream: Any) -> None: ...
    def copies(self) -> dict[str, int]: ...
    def empty(self, shape: tuple[int, ...], *, dtype: Any, device: Any) -> Any: ...
    def launch(self, stream: Any, work: Callable[[], None]) -> None: ...


class CopyCounter:
    """Thread-safe counts of full copies by kind (see COPY_KINDS)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: collections.Counter[str] = collections.Counter()

    def add(self, kind: str) -> None:
        with self._lock:
            self._counts[kind] += 1

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return {kind: self._counts[kind] for kind in COPY_KINDS}


def torch_device(device: Any) -> Any:
    """``device`` as a ``torch.device``; PlatformError when torch cannot read it."""
    torch = require_torch()
    try:
        return torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise PlatformError(f"device={device!r} is not a torch device: {exc}") from exc


def device_error(device: Any, count: int, backend: str) -> PlatformError:
    """The error for a ``device=`` this machine does not have."""
    have = ", ".join(f"'cuda:{i}'" for i in range(count)) or "none"
    return PlatformError(
        f"device={device!r} does not exist here ({backend} sees {count} CUDA device(s): "
        f"{have}); pass one of those, or device=None to keep batches on the CPU"
    )


def _release(free: Any, ptr: int, fences: Fences) -> None:
    # Runs once nothing views the memory; the GPU may still be reading it.
    try:
        fences.drain()
        free(ptr)
    except Exception as exc:  # at interpreter exit the runtime may already be gone
        _log.debug("edgeload: freeing CUDA memory at %#x failed: %s", ptr, exc)


def allocate_cuda_slot_memory(engine: Engine, mode: str, nbytes: int) -> SlotMemory:
    """Allocate ``nbytes`` through the CUDA runtime (CudaEngine.allocate_slot_memory)."""
    runtime = _cuda.load_cudart()
    if mode == "managed":
        # On Jetsons the CPU may not touch globally attached managed memory while any
        # kernel runs, so there it stays host-attached and is attached per use.
        per_stream = not cuda_device().concurrent_managed_access
        ptr = runtime.malloc_managed(nbytes, attach_global=not per_stream)
        owner = SlotMemory(
            engine, mode, nbytes, host_ptr=ptr, device_ptr=ptr, attach_per_stream=per_stream
        )
        weakref.finalize(owner, _release, runtime.free, ptr, owner.fences)
        return owner
    ptr = runtime.host_alloc(nbytes, mapped=mode == "mapped")
    try:
        device_ptr = runtime.host_device_pointer(ptr) if mode == "mapped" else 0
    except PlatformError:
        runtime.free_host(ptr)
        raise
    owner = SlotMemory(engine, mode, nbytes, host_ptr=ptr, device_ptr=device_ptr)
    weakref.finalize(owner, _release, runtime.free_host, ptr, owner.fences)
    return owner


class CudaEngine:
    """torch's CUDA, with ctypes for mapped and managed memory."""

    name = "cuda"

    def __init__(self) -> None:
        self._copies = CopyCounter()

    def status(self) -> CudaStatus:
        return cuda_status()

    def check_memory_mode(self, mode: str) -> None:
        check_memory_mode(mode)

    def check_device(self, device: Any) -> Any:
        """``device`` as a ``torch.device`` with its index; PlatformError if absent."""
        torch = require_torch()
        chosen = torch_device(device)
        if chosen.type != "cuda":
            raise PlatformError(
                f"device={device!r}: edgeload moves batches to CUDA devices only; pass "
                "'cuda' or 'cuda:N', or device=None to keep batches on the CPU"
            )
        status = cuda_status()
        if not status.usable:
            raise PlatformError(
                f"device={device!r} needs a CUDA device; {status.reason}. Pass device=None "
                "(batches stay on the CPU, memory_mode='host')"
            )
        count = int(torch.cuda.device_count())
        index = torch.cuda.current_device() if chosen.index is None else chosen.index
        if not 0 <= index < count:
            raise device_error(device, count, f"torch {torch.__version__}")
        return torch.device("cuda", index)

    def allocate_slot_memory(self, mode: str, nbytes: int) -> SlotMemory:
        return allocate_cuda_slot_memory(self, mode, nbytes)

    def current_stream(self) -> Any:
        return require_torch().cuda.current_stream()

    def new_stream(self, device: Any = None) -> Any:
        return require_torch().cuda.Stream(device=device)

    def use_stream(self, stream: Any) -> AbstractContextManager[Any]:
        return require_torch().cuda.stream(stream)  # type: ignore[no-any-return]

    def new_event(self) -> Any:
        return require_torch().cuda.Event()

    def is_legacy_stream(self, stream: Any) -> bool:
        return int(stream.cuda_stream) == 0

    def attach(self, owner: SlotMemory, stream: Any, *, mode: str) -> None:
        _cuda.load_cudart().stream_attach(int(stream.cuda_stream), owner.host_ptr, mode=mode)

    def view(self, interface: Any, device: Any) -> Any:
        return require_torch().as_tensor(interface, device=device)

    def to_device(self, tensor: Any, device: Any, *, non_blocking: bool) -> Any:
        if tensor.is_cuda:
            return tensor.to(device)
        page_locked = tensor.is_pinned() or find_owner(tensor) is not None
        self._copies.add("h2d_async" if page_locked and non_blocking else "h2d_pageable")
        return tensor.to(device, non_blocking=non_blocking)

    def pin(self, tensor: Any) -> Any:
        self._copies.add("pin")
        return tensor.pin_memory()

    def is_device_tensor(self, value: Any) -> bool:
        return bool(getattr(value, "is_cuda", False))

    def record_stream(self, tensor: Any, stream: Any) -> None:
        tensor.record_stream(stream)

    def copies(self) -> dict[str, int]:
        """Full copies made through this engine, by kind."""
        return self._copies.snapshot()

    def empty(self, shape: tuple[int, ...], *, dtype: Any, device: Any) -> Any:
        """A new device tensor (torch's caching allocator: no cudaMalloc once warm)."""
        return require_torch().empty(shape, dtype=dtype, device=device)

    def launch(self, stream: Any, work: Callable[[], None]) -> None:
        """Queue ``work``'s kernels (torch ops on device tensors) on ``stream``."""
        with self.use_stream(stream):
            work()

    def device_properties(self) -> Any:
        """The current CUDA device's memory properties."""
        return cuda_device()


_default: CudaEngine | None = None
_default_lock = threading.Lock()


def default_engine() -> CudaEngine:
    """The process's CUDA engine (made on first use; cheap, touches no GPU by itself)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = CudaEngine()
        return _default
