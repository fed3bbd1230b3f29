"""How a leased slot comes back to its pool when the consumer drops the last view of it.

A leased slot is tracked by a weak reference to its view's buffer. When that buffer
dies, a callback wakes a waiting producer (a host slot), or fences and frees the slot
(a GPU slot); :func:`collect` takes back every slot whose reference is dead, so a
wake-up lost to Ctrl-C loses no slot. All of it works on the pool's
:class:`~._slot_core.PoolCore`, never on the pool.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable, Protocol

import numpy as np

from ._lifecycle import Wakeups

__all__ = ["Releaser", "collect", "on_drop"]


class CoreFields(Protocol):
    """What of :class:`~._slot_core.PoolCore` the return path uses (its fields)."""

    lock: threading.RLock
    returned: Wakeups
    leased: dict[int, weakref.ref[np.ndarray]]
    free: list[int]
    retired: set[int]
    arrays: list[np.ndarray]
    guard: Any
    closed: bool


def on_drop(core: CoreFields, index: int) -> Callable[[Any], object]:
    """The weak-reference callback for a leased view of slot ``index``.

    It runs in whichever thread drops the last reference, usually the consumer's main
    thread, and any Python code there is a point where Ctrl-C's KeyboardInterrupt can
    be raised; raised inside a weakref callback, it is printed as "Exception ignored"
    and lost, and the program runs on (issue #13). So a host slot's callback is C code
    only, ``SimpleQueue.put``: it wakes a waiting producer, and ``collect`` takes the
    slot back. A GPU slot is fenced on the dropping thread's stream, which needs Python.
    """
    return Releaser(core, index) if core.guard is not None else core.returned.post


class Releaser:
    """Weak-reference callback of a GPU slot: the consumer dropped its last view."""

    __slots__ = ("_core", "_index")

    def __init__(self, core: CoreFields, index: int) -> None:
        self._core, self._index = core, index

    def __call__(self, _ref: object) -> None:
        core = self._core
        with core.lock:
            if _take_back(core, self._index):
                core.returned.post(None)


def collect(core: CoreFields) -> None:
    """Take back the slots whose views are gone (``core.lock`` held).

    The dead weak reference is the record, not the wake-up on ``returned``, so a
    wake-up lost to an interrupt loses no slot.
    """
    core.returned.clear()
    for index in [i for i, ref in core.leased.items() if ref() is None]:
        _take_back(core, index)


def _take_back(core: CoreFields, index: int) -> bool:
    """Slot ``index``'s view is gone: free it (or retire it); whether it is free."""
    if core.leased.pop(index, None) is None or core.closed:
        return False
    if core.guard is not None and not core.guard.fence(index, core.arrays[index]):
        core.retired.add(index)
        return False
    core.free.append(index)
    return True
