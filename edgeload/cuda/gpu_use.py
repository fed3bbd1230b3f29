"""Which slot bytes the GPU still reads: fences recorded on views, and the pool's guard.

The lease rule gains a GPU half: a slot is not rewritten while GPU work that reads it
is still queued. Whoever queues such work records a fence (an event) on the slot's
bytes with :func:`record_gpu_use`; the slot pool records one on the consumer's stream
when the consumer drops a batch, and asks :func:`gpu_busy` before it hands a slot to
a producer again. A tensor from :func:`as_cuda_tensor` holds its slot's lease while
it lives and fences the bytes when it dies.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import numpy as np

from ._fences import POLL_S, hold_until_done
from ._owner import byte_range, find_owner

__all__ = ["SlotGuard", "fence_bytes", "gpu_busy", "record_gpu_use", "wait_gpu_idle"]

_log = logging.getLogger(__name__)


def record_gpu_use(view: Any, *, stream: Any = None) -> bool:
    """Fence ``view``'s bytes: they count as in use until ``stream``'s queued work is done.

    Until then ``view`` itself is kept alive, so a slot pool that recycles a slot when
    its last view goes cannot hand the slot to a producer early.

    Args:
        view: a view of GPU slot memory (from allocate_gpu_array()), numpy or torch.
        stream: a stream of the memory's engine; default its current stream.

    Returns:
        False, doing nothing, when ``view`` is host memory.
    """
    owner = find_owner(view)
    if owner is None:
        return False
    engine = owner.engine
    event = engine.new_event()
    event.record(stream if stream is not None else engine.current_stream())
    owner.fences.add(*byte_range(view, owner), event)
    hold_until_done(event, view)
    return True


def gpu_busy(view: Any) -> bool:
    """Whether GPU work fenced on any of ``view``'s bytes is still queued or running."""
    owner = find_owner(view)
    return owner is not None and owner.fences.busy(*byte_range(view, owner))


def wait_gpu_idle(view: Any, *, timeout_s: float) -> bool:
    """Wait until gpu_busy(view) is false; False if ``timeout_s`` passed first."""
    deadline = time.monotonic() + timeout_s
    while gpu_busy(view):
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)
    return True


def fence_bytes(view: Any, stream: Any) -> bool:
    """Count ``view``'s bytes as in use until ``stream``'s queued work is done (no hold).

    Unlike record_gpu_use() nothing is kept alive: a slot pool skips fenced free slots
    (gpu_busy) and the memory is freed only after its fences complete.

    Returns:
        False, doing nothing, when ``view`` is host memory.
    """
    owner = find_owner(view)
    if owner is None:
        return False
    event = owner.engine.new_event()
    event.record(stream)
    owner.fences.add(*byte_range(view, owner), event)
    return True


class SlotGuard:
    """The slot pool's GPU half of the lease rule, for pools in a GPU memory mode.

    The pool calls :meth:`lease` when it hands a batch out, which notes the stream
    current in the consumer's thread, and :meth:`fence` when the consumer drops it,
    which fences the slot on that stream; :meth:`pop_idle` skips a free slot while the
    GPU still reads it. So a
    ``batch.cuda(non_blocking=True)`` queued behind the model's kernels finishes
    before the slot is written again.

    Args:
        engine: the GPU engine of the pool's memory.
    """

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self._lease_streams: dict[int, Any] = {}  # slot index -> consumer's stream then

    def lease(self, index: int) -> None:
        """Slot ``index`` goes to the consumer: note the stream current in its thread."""
        self._lease_streams[index] = self.engine.current_stream()

    def fence(self, index: int, view: np.ndarray[Any, Any]) -> bool:
        """Slot ``index`` came back: fence ``view``'s bytes on the stream noted at its
        lease and on the calling thread's stream.

        Returns False when no fence could be made (interpreter exit, a broken
        runtime): the pool then retires the slot rather than risk rewriting it.
        """
        stream = self._lease_streams.pop(index, None)
        if sys.is_finalizing():
            return False
        owner = find_owner(view)
        if owner is None:
            return True
        try:
            here = self.engine.current_stream()
            fence_bytes(view, here)
            if stream is not None and stream is not here and stream != here:
                fence_bytes(view, stream)
        except Exception as exc:
            _log.warning("edgeload: could not fence a released slot; retiring it: %s", exc)
            return False
        return True

    def pop_idle(self, free: list[int], arrays: list[np.ndarray[Any, Any]]) -> int | None:
        """Pop from ``free`` the newest slot no queued GPU work reads, or None."""
        for position in range(len(free) - 1, -1, -1):
            if not gpu_busy(arrays[free[position]]):
                return free.pop(position)
        return None

    def forget(self) -> None:
        """The pool closed: drop the streams noted for slots still leased."""
        self._lease_streams.clear()
