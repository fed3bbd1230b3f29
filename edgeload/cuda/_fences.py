"""CUDA events that keep slot memory out of the producers' hands while the GPU reads it.

Two halves of one rule ("a slot is not rewritten while GPU work that reads it is
queued"):

- :class:`Fences` answers "is the GPU still using these bytes?" for one allocation.
- :func:`hold_until_done` keeps a reference to the slot's array until the event has
  completed. The slot pool recycles a slot when the last reference to its view goes,
  so holding the view *is* holding the lease: the pool needs no GPU knowledge.

Held references are dropped by a short-lived thread, ``edgeload-gpu-fence``, that runs
only while some event is pending and exits when none is.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

__all__ = ["POLL_S", "Fences", "hold_until_done", "pending_holds"]

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
