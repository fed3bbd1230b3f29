"""Slot memory in a GPU mode, and how to find the allocation behind any view of it.

A batch reaches the user as a torch tensor over a numpy view over a memoryview of the
slot; walking ``.base`` from a tensor's ``.numpy()`` ends at the tensor, not at the
allocation. So every GPU-mode allocation is registered by its address range, and a
view (numpy array, torch tensor or bare address) finds its allocation by where its
first byte lies.
"""

from __future__ import annotations

import bisect
import threading
import weakref
from typing import Any

import numpy as np

from ._fences import Fences

__all__ = ["SlotMemory", "address_of", "byte_range", "find_owner"]


class SlotMemory:
    """One allocation of slot memory in a GPU mode, exposed to numpy.

    Args:
        engine: the engine that made it (its streams and events fence the memory).
        mode: ``"pinned"``, ``"mapped"`` or ``"managed"``.
        nbytes: its size.
        host_ptr: the CPU address of its first byte.
        device_ptr: the GPU address of the same byte (0 when the GPU cannot address
            it in place, as for ``pinned``).
        attach_per_stream: managed memory that must be attached to a stream per use
            (devices without concurrent managed access).
    """

    def __init__(
        self,
        engine: Any,
        mode: str,
        nbytes: int,
        *,
        host_ptr: int,
        device_ptr: int,
        attach_per_stream: bool = False,
    ) -> None:
        self.engine = engine
        self.mode = mode
        self.nbytes = nbytes
        self.host_ptr = host_ptr
        self.device_ptr = device_ptr
        self.attach_per_stream = attach_per_stream
        self.fences = Fences()
        _register(self)

    @property
    def __array_interface__(self) -> dict[str, Any]:
        return {
            "shape": (self.nbytes,),
            "typestr": "|u1",
            "data": (self.host_ptr, False),
            "version": 3,
        }


# Sorted starts of live allocations, with weak references to them. Entries go when the
# allocation object dies, which is before its memory is freed (see memory._release).
_lock = threading.Lock()
_starts: list[int] = []
_owners: dict[int, weakref.ref[SlotMemory]] = {}


def _register(owner: SlotMemory) -> None:
    start, ref = owner.host_ptr, weakref.ref(owner)
    with _lock:
        if start not in _owners:
            bisect.insort(_starts, start)
        # A new allocation at a freed one's address replaces it (its ref is dead by then).
        _owners[start] = ref
    weakref.finalize(owner, _unregister, start, ref)


def _unregister(start: int, ref: weakref.ref[SlotMemory]) -> None:
    with _lock:
        if _owners.get(start) is not ref:
            return  # already replaced by a newer allocation at the same address
        del _owners[start]
        del _starts[bisect.bisect_left(_starts, start)]


def address_of(view: Any) -> int | None:
    """The address of ``view``'s first element: a numpy array, a torch tensor or an int."""
    if isinstance(view, int):
        return view
    if isinstance(view, np.ndarray):
        return int(view.__array_interface__["data"][0])
    data_ptr = getattr(view, "data_ptr", None)
    if callable(data_ptr) and getattr(getattr(view, "device", None), "type", "cpu") == "cpu":
        return int(data_ptr())
    return None


def find_owner(view: Any) -> SlotMemory | None:
    """The GPU-mode allocation that holds ``view``'s first byte, or None (host memory)."""
    address = address_of(view)
    if address is None:
        return None
    with _lock:
        index = bisect.bisect_right(_starts, address) - 1
        if index < 0:
            return None
        ref = _owners.get(_starts[index])
    owner = ref() if ref is not None else None
    if owner is None or address >= owner.host_ptr + max(owner.nbytes, 1):
        return None
    return owner


def byte_range(view: Any, owner: SlotMemory) -> tuple[int, int]:
    """``[start, stop)`` of the bytes ``view`` spans, as offsets into ``owner``."""
    if not isinstance(view, np.ndarray):
        view = view.numpy() if hasattr(view, "numpy") else np.asarray(view)
    start = int(view.__array_interface__["data"][0]) - owner.host_ptr
    if view.size == 0:
        return start, start
    # numpy's byte_bounds moved between 1.x and 2.x; the arithmetic is short.
    steps = [(view.shape[i] - 1) * view.strides[i] for i in range(view.ndim)]
    low = sum(step for step in steps if step < 0)
    high = sum(step for step in steps if step > 0)
    return start + low, start + high + view.itemsize
