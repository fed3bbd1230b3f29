"""The host engine's "device": its slot memory, which tensors count as on the GPU, copies.

An asynchronous copy from slot memory reads its source when its stream runs it, not
when it is queued, as a DMA engine does; a copy whose source bytes changed in between
is counted as torn, so a test sees a slot rewritten too early. Copies from pageable
memory are staged at once, as CUDA stages them.
"""

from __future__ import annotations

import ctypes
import mmap
import threading
import weakref
import zlib
from typing import Any

import numpy as np

from .._compat import tensor_nbytes
from .._deps import require_torch
from ._host_streams import HostStream
from ._owner import SlotMemory, address_of, find_owner
from .engine import CopyCounter

__all__ = ["HostDevice"]


class _HostArrayInterface:
    """What torch.as_tensor does with a ``__cuda_array_interface__``, on the CPU."""

    def __init__(self, view: Any) -> None:
        face = view.__cuda_array_interface__
        if face["data"][1]:
            # torch's own check (torch/csrc/utils/tensor_new.cpp): it has no read-only tensors.
            raise TypeError("the read only flag is not supported, should always be False")
        self._view = view  # the tensor keeps the view (and so the slot's lease) alive
        self.__array_interface__ = {**face, "version": 3}
        self.__array_interface__.pop("stream", None)


def _window(address: int | None, nbytes: int) -> np.ndarray[Any, Any]:
    """A copy of ``nbytes`` at ``address`` as they are now."""
    if not nbytes or address is None:
        return np.zeros(0, np.uint8)
    return np.ctypeslib.as_array((ctypes.c_ubyte * nbytes).from_address(address)).copy()


class HostDevice:
    """The "device" tensors a host engine made, its copy counts and its torn copies."""

    def __init__(self) -> None:
        self.copies = CopyCounter()
        self._lock = threading.Lock()
        self._torn = 0
        self._tensors: dict[int, weakref.ref[Any]] = {}

    def torn_copies(self) -> int:
        """Async copies whose source changed between queueing and running."""
        with self._lock:
            return self._torn

    def holds(self, value: Any) -> bool:
        """Whether ``value`` is a tensor this device made (a "device tensor")."""
        with self._lock:
            held = self._tensors.get(id(value))
        return held is not None and held() is value

    def mark(self, tensor: Any) -> None:
        """Count ``tensor`` as on the device for as long as it lives."""
        key = id(tensor)

        def forget(_ref: object) -> None:
            with self._lock:
                if self._tensors.get(key) is ref:
                    del self._tensors[key]

        ref = weakref.ref(tensor, forget)
        with self._lock:
            self._tensors[key] = ref

    def allocate(
        self, engine: Any, mode: str, nbytes: int, *, attach_per_stream: bool
    ) -> SlotMemory:
        """Page-aligned anonymous memory standing in for ``mode``'s slot memory."""
        memory = mmap.mmap(-1, nbytes)
        window = (ctypes.c_ubyte * nbytes).from_buffer(memory)
        address = ctypes.addressof(window)
        owner = SlotMemory(
            engine,
            mode,
            nbytes,
            host_ptr=address,
            device_ptr=0 if mode == "pinned" else address,
            attach_per_stream=attach_per_stream,
        )
        owner._keep = (memory, window)  # type: ignore[attr-defined]
        return owner

    def pin(self, engine: Any, tensor: Any) -> Any:
        """A copy of ``tensor`` in ``engine``'s "pinned" memory (counted as a ``pin`` copy)."""
        torch = require_torch()
        self.copies.add("pin")
        source = tensor.contiguous()
        nbytes = tensor_nbytes(source)
        owner = engine.allocate_slot_memory("pinned", max(1, nbytes))
        flat = torch.from_numpy(np.asarray(owner)[:nbytes])
        pinned = flat.view(source.dtype).reshape(source.shape)
        pinned.copy_(source)
        return pinned

    def view(self, interface: Any) -> Any:
        """A "device" tensor over the bytes ``interface`` describes (no copy)."""
        tensor = require_torch().from_numpy(np.asarray(_HostArrayInterface(interface)))
        self.mark(tensor)
        return tensor

    def copy_in(self, tensor: Any, stream: HostStream, *, delay_s: float, async_: bool) -> Any:
        """Copy ``tensor`` to a new device tensor on ``stream``, ``delay_s`` after it starts.

        With ``async_`` and a slot-memory source the copy reads its source when it runs;
        otherwise the source is staged now (and the caller waits unless ``async_``).
        """
        torch = require_torch()
        source = tensor.contiguous()
        target = torch.empty_like(source)
        self.mark(target)
        nbytes = tensor_nbytes(source)
        out = target.view(torch.uint8).numpy().reshape(-1) if nbytes else None
        owner = find_owner(source)
        if owner is not None and async_:
            self.copies.add("h2d_async")
            address = address_of(source)
            expected = zlib.crc32(_window(address, nbytes).tobytes())

            # The queued copy keeps the allocation mapped (``keep``), not the slot's lease.
            def copy(keep: SlotMemory = owner) -> None:
                # Reads the slot now, not when queued: a rewrite in between is caught.
                bytes_now = _window(address, nbytes)
                if zlib.crc32(bytes_now.tobytes()) != expected:
                    with self._lock:
                        self._torn += 1
                if out is not None:
                    out[:] = bytes_now

            stream.submit(delay_s, copy)
        else:
            self.copies.add("h2d_pageable")
            staged = source.view(torch.uint8).numpy().reshape(-1).copy() if nbytes else None

            def land() -> None:
                if out is not None and staged is not None:
                    out[:] = staged

            stream.submit(delay_s, land)
            if not async_:
                stream.synchronize()
        return target

    def read_later(self, tensor: Any, stream: HostStream, *, delay_s: float) -> Any:
        """Queue a "kernel" on ``stream`` that reads ``tensor`` when it runs; what it read."""
        torch = require_torch()
        out = torch.empty_like(tensor)
        owner = find_owner(tensor)
        address, nbytes = address_of(tensor), tensor_nbytes(tensor)
        flat = out.view(torch.uint8).numpy().reshape(-1) if nbytes else None
        keep: Any = owner if owner is not None else tensor

        def read(keep: Any = keep) -> None:
            if flat is not None:
                flat[:] = _window(address, nbytes)

        stream.submit(delay_s, read)
        return out
