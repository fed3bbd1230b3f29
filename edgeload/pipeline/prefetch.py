"""A prefetch queue bounded both in items and in bytes.

Producers ``put`` items with their size; the consumer ``get``s them. What ``put`` does
when the queue is full (:data:`WhenFull`, the ``policy=`` argument) is one of:

- ``block``: back-pressure. ``put`` waits for room, so every item arrives once, in order.
- ``latest``: for live cameras. ``put`` never waits: it drops the oldest items until the
  new one fits, counts them, and hands each to ``on_drop`` so its slot can be recycled.

End of stream is the :data:`END` sentinel (``put_end()``); it takes no room.

The queue is three parts: :class:`HeldItems`, the FIFO bounded in items and bytes, with
its counters (puts, gets, drops, time spent waiting) and no locking of its own;
:class:`Handoff`, the lock over it and each side's wait; and :class:`Prefetcher`, the
public face. A producer waits for room on a ``Condition``; the consumer, often the main
thread where Ctrl-C lands, takes the same lock with ``with`` (C code, unlike
``Condition.__enter__``) and waits for an item on :class:`~._lifecycle.Wakeups` holding
no lock, so Ctrl-C can never leave the lock held. The queue's lifecycle lives
in the handoff too: close wakes every waiter, who then raises ClosedError.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Final, Generic, Literal, TypeVar

from .. import _args
from ..errors import ArgumentError, ClosedError, WaitTimeout, WorkerTimeout
from ._lifecycle import POLL_INTERVAL_S, Lifecycle, Wakeups

__all__ = ["END", "PrefetchStats", "Prefetcher", "WhenFull"]

T = TypeVar("T")
WhenFull = Literal["block", "latest"]
"""What ``Prefetcher.put`` does when the queue is full: wait, or drop the oldest.

Distinct from ``edgeload.video.source.Policy``, which says which frames a source delivers."""
_WHEN_FULL: Final = ("block", "latest")


class _End:
    """The end-of-stream sentinel type (one instance: :data:`END`)."""

    _instance: _End | None = None

    def __new__(cls) -> _End:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "edgeload.END"

    def __reduce__(self) -> str:
        return "END"


END: Final = _End()
"""End of stream: ``Prefetcher.get()`` returns it once every item before it was taken."""


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


def _check_arguments(name: str, policy: str, max_items: int, max_bytes: int | None) -> WhenFull:
    """The policy, normalised; every argument checked (ArgumentError)."""
    if not isinstance(name, str) or not name:
        raise ArgumentError(f"Prefetcher: name must be a non-empty str, got {name!r}")
    policy = _args.choice(name, "policy", policy, _WHEN_FULL,
                          allowed_text="'block' or 'latest'")  # fmt: skip
    _args.integer(name, "max_items", max_items, low=1)
    _args.integer(name, "max_bytes", max_bytes, low=1, none_ok=True)
    return policy  # type: ignore[return-value]


class Prefetcher(Generic[T]):
    """A thread-safe FIFO between producers and one consumer, bounded in items and bytes.

    Args:
        max_items: most items held at once (>= 1).
        max_bytes: most bytes held at once, or None for no byte bound. An item larger
            than this is refused with ValueError rather than wedging the queue.
        policy: what ``put`` does when full (:data:`WhenFull`): ``"block"`` waits for
            room, ``"latest"`` drops the oldest items.
        on_drop: called with each item ``latest`` drops (outside the lock), e.g. to
            release its slot. Exceptions from it propagate to the producer.
        name: used in messages.

    Raises:
        ArgumentError: a bound below 1 or not an int, or an unknown ``policy`` (a
            ValueError; ``policy`` in any case).
    """

    def __init__(
        self,
        *,
        max_items: int,
        max_bytes: int | None = None,
        policy: WhenFull = "block",
        on_drop: Callable[[T], None] | None = None,
        name: str = "prefetch",
    ) -> None:
        policy = _check_arguments(name, policy, max_items, max_bytes)
        if on_drop is not None and not callable(on_drop):
            raise ArgumentError(f"{name}: on_drop must be callable or None, got {on_drop!r}")
        self.name = name
        self.policy: WhenFull = policy
        self.max_items = max_items
        self.max_bytes = max_bytes
        self._on_drop = on_drop
        self._items = HeldItems(max_items, max_bytes, END)
        self._ended = False
        self._handoff = Handoff(name, self._items)  # the lock, the waits, the lifecycle

    def __enter__(self) -> Prefetcher[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[T]:
        """Yield items until END (each ``get`` uses its default timeout)."""
        while True:
            item = self.get()
            if item is END:
                return
            yield item  # type: ignore[misc]

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._handoff.lifecycle is Lifecycle.CLOSED

    def put(self, item: T, *, nbytes: int = 0, timeout_s: float | None = None) -> None:
        """Add ``item`` of ``nbytes`` bytes; with ``block``, wait for room.

        Args:
            item: anything but END (use ``put_end``).
            nbytes: its size in bytes, counted against ``max_bytes``.
            timeout_s: most seconds to wait for room (``block``); None waits until room
                or close().

        Raises:
            ClosedError: the queue is closed (also while waiting).
            WaitTimeout: no room within ``timeout_s`` (a TimeoutError).
            ValueError: ``nbytes`` above ``max_bytes``, negative, or a put after END.
        """
        if nbytes < 0 or (self.max_bytes is not None and nbytes > self.max_bytes):
            raise ArgumentError(
                f"{self.name}: item of {nbytes} bytes cannot fit max_bytes={self.max_bytes}; "
                "raise max_bytes (the prefetch budget) or use smaller batches"
            )
        dropped: list[T] = []
        with self._handoff.lock:
            self._handoff.check_open("put()")
            if self._ended:
                raise ValueError(f"{self.name}: put() after put_end()")
            if self.policy == "latest":
                while not self._items.fits(nbytes):
                    dropped.append(self._items.drop_oldest())
            else:
                self._handoff.wait_for_room(lambda: self._items.fits(nbytes), timeout_s)
            self._items.append(item, nbytes)
            self._handoff.arrived()
        if self._on_drop is not None:
            for old in dropped:
                self._on_drop(old)

    def put_end(self) -> None:
        """Mark end of stream; ``get`` returns END after the items before it.

        Raises:
            ClosedError: the queue is closed.
        """
        with self._handoff.lock:
            self._handoff.check_open("put_end()")
            if not self._ended:
                self._ended = True
                self._items.append(END, 0)
                self._handoff.arrived()

    def get(self, *, timeout_s: float | None = None) -> T | _End:
        """Remove and return the oldest item, or END once the stream ended.

        Args:
            timeout_s: most seconds to wait; None waits until an item or close().

        Raises:
            ClosedError: the queue is closed (also while waiting).
            WorkerTimeout: nothing arrived within ``timeout_s``.
        """
        item: T | _End = self._handoff.take(timeout_s)
        return item

    def stats(self) -> PrefetchStats:
        """Return a snapshot of the counters."""
        with self._handoff.lock:
            return self._items.stats()

    def drain(self) -> list[T]:
        """Remove and return every held item (not END), e.g. to release their slots."""
        with self._handoff.lock:
            items: list[T] = self._items.drain()
            self._handoff.made_room()
            return items

    def close(self) -> None:
        """Wake every waiter with ClosedError and drop held items; idempotent."""
        with self._handoff.lock:
            self._items.clear()
            self._handoff.close()
