"""The GPU half of the lease rule: a slot is not rewritten while GPU work that reads it is queued.

Three pieces, lowest first:

- :class:`SlotMemory` is one allocation of slot memory in a GPU mode. A batch reaches
  the user as a torch tensor over a numpy view over a memoryview of the slot; walking
  ``.base`` from a tensor's ``.numpy()`` ends at the tensor, not at the allocation. So
  every GPU-mode allocation is registered by its address range, and a view (numpy
  array, torch tensor or bare address) finds its allocation (:func:`find_owner`) by
  where its first byte lies.
- :class:`Fences` (CUDA events, each over a byte range of one allocation) answers "is
  the GPU still using these bytes?", and :func:`hold_until_done` keeps a reference to
  the slot's array until an event has completed. The slot pool recycles a slot when
  the last reference to its view goes, so holding the view *is* holding the lease: the
  pool needs no GPU knowledge. Held references are dropped by a short-lived thread,
  ``edgeload-gpu-fence``, that runs only while some event is pending and exits when
  none is.
- Whoever queues GPU work that reads a slot records a fence on its bytes with
  :func:`record_gpu_use`; the slot pool (:class:`SlotGuard`) records one on the
  consumer's stream when the consumer drops a batch, and asks :func:`gpu_busy` before
  it hands a slot to a producer again. A tensor from
  :func:`~edgeload.cuda.memory.as_cuda_tensor` holds its slot's lease while it lives
  and fences the bytes when it dies.
"""

from __future__ import annotations

import bisect
import logging
import sys
import threading
import time
import weakref
from typing import Any

import numpy as np

__all__ = [
    "POLL_S",
    "Fences",
    "SlotGuard",
    "SlotMemory",
    "address_of",
    "byte_range",
    "fence_bytes",
    "find_owner",
    "gpu_busy",
    "hold_until_done",
    "pending_holds",
    "record_gpu_use",
    "wait_gpu_idle",
]

_log = logging.getLogger(__name__)


# How often the fence thread polls events: short against a frame (~33 ms), long
# enough to cost nothing measurable on a 4-core board.
POLL_S = 0.0005


class Fences:
    """CUDA events, each covering a byte range [start, stop) of one allocation."""

    def __init__(self) -> None:
        # Reentrant: a tensor freed by GC while this thread prunes records its own fence.
        self._lock = threading.RLock()
        self._events: list[tuple[int, int, Any]] = []

    def _prune(self) -> None:
        self._events = [e for e in self._events if not e[2].query()]

    def add(self, start: int, stop: int, event: Any) -> None:
        """Count [start, stop) as in use until ``event`` completes."""
        with self._lock:
            self._prune()
            self._events.append((start, stop, event))

    def busy(self, start: int, stop: int) -> bool:
        """Whether an uncompleted event covers any byte of [start, stop)."""
        with self._lock:
            self._prune()
            return any(s < stop and start < e for s, e, _ in self._events)

    def drain(self) -> None:
        """Block until every recorded event has completed."""
        with self._lock:
            events, self._events = self._events, []
        for _, _, event in events:
            event.synchronize()


class _Holder:
    """The references kept alive until their events complete, and the thread dropping them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: list[tuple[Any, object]] = []
        self._thread: threading.Thread | None = None

    def hold(self, event: Any, obj: object) -> None:
        with self._lock:
            self._held.append((event, obj))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="edgeload-gpu-fence", daemon=True
                )
                self._thread.start()

    def count(self) -> int:
        with self._lock:
            return len(self._held)

    def _run(self) -> None:
        while True:
            keep: list[tuple[Any, object]] = []
            done: list[tuple[Any, object]] = []
            with self._lock:
                for held in self._held:
                    (done if _completed(held[0]) else keep).append(held)
                self._held = keep
                if not keep:
                    self._thread = None
            # Dropped outside the lock: the last reference may run the pool's release
            # callback or free CUDA memory.
            del done
            if not keep:
                return
            time.sleep(POLL_S)


def _completed(event: Any) -> bool:
    try:
        return bool(event.query())
    except Exception as exc:  # a broken event must not pin its slot forever
        _log.warning("edgeload: CUDA event query failed; releasing its slot: %s", exc)
        return True


_HOLDER = _Holder()


def hold_until_done(event: Any, obj: object) -> None:
    """Keep ``obj`` alive until the CUDA ``event`` has completed."""
    _HOLDER.hold(event, obj)


def pending_holds() -> int:
    """How many references are held for uncompleted events (for tests and stats)."""
    return _HOLDER.count()


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
        engine: Any,  # an Engine: engine.py imports this module, so it cannot be named here
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
# allocation object dies, which is before its memory is freed (see engine._release).
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

    def __init__(self, engine: Any) -> None:  # an Engine, as for SlotMemory
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
