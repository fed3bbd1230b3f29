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

Beside ``every`` streams a ``latest`` frame is copied into the batch as the consumer
takes it (:mod:`edgeload.video._hand_over`), so the same cadence times its
conversion, and nothing waits for the consumer there (``pending`` is 0).
"""

from __future__ import annotations

import time
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
