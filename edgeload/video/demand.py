"""When the consumer will next take a batch, so ``latest`` streams convert only what ships.

A live camera decodes every frame (H.264 needs each one for the next), but turning
a decoded frame into pixels (``retrieve``: colour conversion and copy) and resizing
it into a batch place is wasted on a frame a newer one replaces before the batch
ships.  With a consumer slower than the cameras that is most frames: at 30 fps and
80 ms per batch, five of every seven.

:class:`Demand` watches the consumer's cadence: when it last took a batch, and
how long it usually takes before asking for the next.  A reader asks
:meth:`Demand.wants` after each grab; the answer is yes when the consumer is
waiting, or when no batch is waiting for it and its next request is due within
about one frame interval (so the frame converted now, or its successor, is the one
the consumer gets), or when the consumer is late for a batch that is waiting (so
that batch is replaced by a fresher one rather than growing old).  Otherwise the
frame is dropped unconverted and counted.

The fields are plain floats and bools, written by the consumer thread and read by
readers; a stale read only moves one frame's decision, so no lock is taken.

In a loader that also has ``every`` streams the consumer's cadence says little
about when a ``latest`` frame ships: its frame goes into the newest open batch and
stays there, replaced by each newer one, until that batch stops being the newest
(it is sealed, or ``every`` streams open another, which they do as soon as the
consumer frees a slot).  :class:`MixedDemand` learns that cadence instead, from when
each newest batch opened, and converts a frame when the
newest batch is due to change within about one frame interval, or when it fills an
empty place in the batch that ships next (which may seal as soon as it is full).
A frame claimed before the change still goes into its batch, so no margin is needed.
"""

from __future__ import annotations

import threading
import time
import typing
from collections.abc import Callable

_SMOOTHING = 0.3  # weight of the newest consumer interval in the running estimate
# Converting, resizing and shipping a frame takes a few ms, more on a loaded box: a
# batch started this much earlier is complete when the consumer asks.
_MARGIN_S = 0.015


class Demand:
    """The consumer's cadence, as the loader's ``__next__`` reports it.

    Args:
        pending: returns how many shipped batches are waiting for the consumer.
    """

    def __init__(self, pending: Callable[[], int]) -> None:
        self._pending = pending
        self.waiting = False
        self.taken_at: float | None = None
        self.consumer_s: float | None = None
        """Running estimate of the consumer's time between batches (its model)."""

    def asked(self, now: float | None = None) -> None:
        """The consumer asked for the next batch."""
        now = time.monotonic() if now is None else now
        if self.taken_at is not None:
            took = now - self.taken_at
            prev = self.consumer_s
            self.consumer_s = took if prev is None else prev + _SMOOTHING * (took - prev)
        self.waiting = True

    def taken(self, now: float | None = None) -> None:
        """The consumer got a batch and went back to its model."""
        self.waiting = False
        self.taken_at = time.monotonic() if now is None else now

    def due_at(self) -> float | None:
        """When the consumer is expected to ask next; None before it has a cadence."""
        if self.taken_at is None or self.consumer_s is None:
            return None
        return self.taken_at + self.consumer_s

    def wants(self, now: float, interval_s: float) -> bool:
        """Whether a frame grabbed at ``now`` should be converted for the next batch.

        Args:
            now: when the frame was grabbed (``time.monotonic()``).
            interval_s: the stream's frame interval: its next frame comes about then.
        """
        if self.waiting:
            return True
        due = self.due_at()
        if due is None:
            return True
        if self._pending() > 0:
            # A batch waits for the consumer: a frame now could only replace it, which
            # is worth it only once the consumer is late and that batch grows stale.
            return now >= due
        return now >= due - interval_s - _MARGIN_S


# (when the newest open batch opened, whether a frame of the stream would replace one of
# its own there, whether that batch ships next), or None when none is open (the
# frame's claim opens one).
# (evaluated at import: typing's generics keep it valid on Python 3.8)
Target = typing.Callable[[int], typing.Optional[typing.Tuple[float, bool, bool]]]


class MixedDemand:
    """When the newest open batch changes, for ``latest`` streams beside ``every`` ones.

    Args:
        target: the assembler's view of where a stream's next ``latest`` frame goes.
    """

    def __init__(self, target: Target) -> None:
        self._target = target
        self._lock = threading.Lock()  # readers of several streams report changes
        self.changed_at: float | None = None
        """When the newest open batch opened."""
        self.interval_s: float | None = None
        """Running estimate of the time one batch stays the newest."""

    def _observe(self, opened_at: float) -> None:
        with self._lock:
            last = self.changed_at
            if last is not None and opened_at <= last:
                return
            if last is not None:
                took, prev = opened_at - last, self.interval_s
                self.interval_s = took if prev is None else prev + _SMOOTHING * (took - prev)
            self.changed_at = opened_at

    def wants_for(self, stream_id: int) -> Callable[[float, float], bool]:
        """The reader's ``wants`` for stream ``stream_id``."""

        def wants(now: float, interval_s: float) -> bool:
            where = self._target(stream_id)
            if where is None:
                return True  # no batch open: this frame's claim opens the next one
            opened_at, replaces, head = where
            self._observe(opened_at)
            if (head and not replaces) or self.changed_at is None or self.interval_s is None:
                return True
            return now >= self.changed_at + self.interval_s - interval_s

        return wants
