"""A prefetch queue bounded both in items and in bytes.

Producers ``put`` items with their size; the consumer ``get``s them. What ``put`` does
when the queue is full (:data:`WhenFull`, the ``policy=`` argument) is one of:

- ``block``: back-pressure. ``put`` waits for room, so every item arrives once, in order.
- ``latest``: for live cameras. ``put`` never waits: it drops the oldest items until the
  new one fits, counts them, and hands each to ``on_drop`` so its slot can be recycled.

End of stream is the :data:`END` sentinel (``put_end()``); it takes no room.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Final, Generic, Literal, TypeVar

from ._handoff import Handoff
from ._held import HeldItems, PrefetchStats
from ._lifecycle import Lifecycle

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


def _check_arguments(name: str, policy: str, max_items: int, max_bytes: int | None) -> None:
    if policy not in _WHEN_FULL:
        raise ValueError(f"{name}: policy must be 'block' or 'latest', got {policy!r}")
    if max_items < 1:
        raise ValueError(f"{name}: max_items must be >= 1, got {max_items}")
    if max_bytes is not None and max_bytes < 1:
        raise ValueError(f"{name}: max_bytes must be >= 1 or None, got {max_bytes}")


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
        ValueError: a bound below 1 or an unknown ``policy``.
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
        _check_arguments(name, policy, max_items, max_bytes)
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
            raise ValueError(
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
