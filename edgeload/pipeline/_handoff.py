"""How a :class:`~edgeload.pipeline.prefetch.Prefetcher`'s producers and consumer wait.

A producer waits for room on a ``Condition``; the consumer, often the main thread where
Ctrl-C lands, takes the same lock with ``with`` (C code, unlike ``Condition.__enter__``)
and waits for an item on :class:`~._lifecycle.Wakeups` holding no lock, so Ctrl-C can
never leave the lock held (issue #13). The queue's lifecycle lives here too: close
wakes every waiter, who then raises ClosedError.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import ClosedError, WaitTimeout, WorkerTimeout
from ._held import HeldItems
from ._lifecycle import POLL_INTERVAL_S, Lifecycle, Wakeups

__all__ = ["Handoff"]


class Handoff:
    """The lock over a queue's :class:`HeldItems`, each side's wait, and its lifecycle."""

    def __init__(self, name: str, items: HeldItems) -> None:
        self.name = name
        self.lock = threading.Lock()
        self.lifecycle = Lifecycle.OPEN
        self._items = items
        self._room = threading.Condition(self.lock)
        self._arrived = Wakeups()

    def check_open(self, what: str) -> None:
        if self.lifecycle is Lifecycle.CLOSED:
            raise ClosedError(f"{self.name}: {what} after close()")

    def arrived(self) -> None:
        """An item (or the end) was added: wake the consumer (lock held)."""
        self._arrived.post_once()

    def made_room(self) -> None:
        """Items were taken: wake the producers waiting for room (lock held)."""
        self._room.notify_all()

    def wait_for_room(self, ready: Callable[[], bool], timeout_s: float | None) -> None:
        """A producer's wait on the condition (lock held) until ``ready()``.

        Raises:
            ClosedError: the queue closed while waiting.
            WaitTimeout: still not ready after ``timeout_s``.
        """
        if ready():
            return
        start = time.monotonic()
        deadline = None if timeout_s is None else start + timeout_s
        try:
            while not ready():
                self.check_open("put()")
                left = POLL_INTERVAL_S if deadline is None else deadline - time.monotonic()
                if left <= 0:
                    raise WaitTimeout(
                        f"{self.name}: no room within {timeout_s} s (depth "
                        f"{len(self._items)}/{self._items.max_items}, {self._items.nbytes} "
                        "bytes held); the consumer is not taking items"
                    )
                self._room.wait(min(left, POLL_INTERVAL_S))
        finally:
            self._items.add_wait("put", time.monotonic() - start)

    def take(self, timeout_s: float | None) -> Any:
        """The consumer's wait (lock not held) for the oldest item, and taking it.

        The end marker is returned but stays, so every later take sees it too.

        Raises:
            ClosedError: the queue is closed (also while waiting).
            WorkerTimeout: nothing arrived within ``timeout_s``.
        """
        start: float | None = None
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            with self.lock:
                self.check_open("get()")
                now = time.monotonic()
                if self._items:
                    if start is not None:
                        self._items.add_wait("get", now - start)
                    item, taken = self._items.take()
                    if taken:
                        self._room.notify_all()
                    return item
                start = now if start is None else start
                left = POLL_INTERVAL_S if deadline is None else deadline - now
                if left <= 0:
                    self._items.add_wait("get", now - start)
                    raise WorkerTimeout(
                        f"{self.name}: no item within {timeout_s} s (depth 0); the producers "
                        "may be stalled or hung; raise timeout_s= if they are just slow",
                        worker=self.name,
                    )
            self._arrived.wait(min(left, POLL_INTERVAL_S))

    def close(self) -> None:
        """Mark the queue closed and wake every waiter (lock held)."""
        self.lifecycle = Lifecycle.CLOSED
        self._room.notify_all()
        self._arrived.post_once()
