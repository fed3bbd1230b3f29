"""What a :class:`~edgeload.pipeline.prefetch.Prefetcher` holds, and what it has counted.

:class:`HeldItems` is the FIFO bounded in items and bytes, with its counters (puts,
gets, drops, time spent waiting) and no locking of its own: the prefetcher's condition
guards it. :class:`PrefetchStats` is a snapshot of it.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

__all__ = ["HeldItems", "PrefetchStats"]


@dataclasses.dataclass(frozen=True)
class PrefetchStats:
    """A snapshot of a :class:`Prefetcher`'s counters."""

    depth: int
    """Items held now."""
    bytes_held: int
    """Bytes held now (the sum of the ``nbytes`` given to ``put``)."""
    max_items: int
    """The item bound."""
    max_bytes: int | None
    """The byte bound (None: unbounded in bytes)."""
    producer_wait_s: float
    """Total time producers spent waiting for room (``block``)."""
    consumer_wait_s: float
    """Total time the consumer spent waiting for an item."""
    drops: int
    """Items dropped by ``latest`` to make room."""
    put_count: int
    """Items accepted by ``put`` (not counting END)."""
    get_count: int
    """Items returned by ``get`` (not counting END)."""


class HeldItems:
    """``(item, nbytes)`` pairs in arrival order, within ``max_items`` and ``max_bytes``.

    The end-of-stream marker is held like an item of 0 bytes that never counts toward
    ``depth``, ``puts`` or ``gets``. Callers check ``fits`` before ``append``.
    """

    def __init__(self, max_items: int, max_bytes: int | None, end: object) -> None:
        self.max_items = max_items
        self.max_bytes = max_bytes
        self.nbytes = 0
        self.puts = 0
        self.gets = 0
        self.drops = 0
        self.producer_wait_s = 0.0
        self.consumer_wait_s = 0.0
        self._end = end
        self._items: collections.deque[tuple[Any, int]] = collections.deque()

    def __bool__(self) -> bool:
        return bool(self._items)

    def __len__(self) -> int:
        return len(self._items)

    @property
    def depth(self) -> int:
        """Items held, not counting the end marker."""
        return sum(1 for item, _ in self._items if item is not self._end)

    def fits(self, nbytes: int) -> bool:
        """Whether one more item of ``nbytes`` stays within both bounds."""
        if len(self._items) >= self.max_items:
            return False
        return self.max_bytes is None or self.nbytes + nbytes <= self.max_bytes

    def append(self, item: Any, nbytes: int) -> None:
        self._items.append((item, nbytes))
        self.nbytes += nbytes
        self.puts += item is not self._end

    def take(self) -> tuple[Any, bool]:
        """The oldest item for the consumer, and whether it was removed: the end marker
        stays, so every later take sees it too."""
        if self._items[0][0] is self._end:
            return self._end, False
        self.gets += 1
        return self._pop(), True

    def drop_oldest(self) -> Any:
        """Remove and return the oldest item, dropped to make room."""
        self.drops += 1
        return self._pop()

    def _pop(self) -> Any:
        item, nbytes = self._items.popleft()
        self.nbytes -= nbytes
        return item

    def drain(self) -> list[Any]:
        """Remove and return every item but the end marker (which stays)."""
        items = [item for item, _ in self._items if item is not self._end]
        self._items = collections.deque((i, n) for i, n in self._items if i is self._end)
        self.nbytes = 0
        return items

    def clear(self) -> None:
        self._items.clear()
        self.nbytes = 0

    def add_wait(self, op: str, seconds: float) -> None:
        """Count ``seconds`` waited by the consumer (``op`` "get") or a producer."""
        if op == "get":
            self.consumer_wait_s += seconds
        else:
            self.producer_wait_s += seconds

    def stats(self) -> PrefetchStats:
        return PrefetchStats(
            depth=self.depth,
            bytes_held=self.nbytes,
            max_items=self.max_items,
            max_bytes=self.max_bytes,
            producer_wait_s=self.producer_wait_s,
            consumer_wait_s=self.consumer_wait_s,
            drops=self.drops,
            put_count=self.puts,
            get_count=self.gets,
        )
