"""The tasks of one DataLoader epoch that are handed to workers and not yet yielded.

Task ``p`` of a map-style epoch goes to worker ``p % num_workers``, the assignment torch
uses; an iterable dataset's tasks go round-robin over the workers whose stream has not
ended (the epoch's :class:`~._state.EpochProgress` decides). Results come back in any
order and are given out in task order, or as they arrive with ``in_order=False``.
"""

from __future__ import annotations

from typing import Any

from ._sampling import EpochOrder
from ._settings import LoaderSettings
from ._slots import LoaderSlots
from ._state import EpochProgress
from ._worker import Result, Task

__all__ = ["TasksInFlight"]


class TasksInFlight:
    """Submits an epoch's tasks, up to the in-flight limit, and takes their results back.

    Each task in flight holds a slot (or None) until its result is taken.
    """

    def __init__(
        self,
        settings: LoaderSettings,
        executor: Any,
        slots: LoaderSlots,
        order: EpochOrder,
        progress: EpochProgress,
    ) -> None:
        self._settings, self._exec, self._slots = settings, executor, slots
        self._order, self._progress = order, progress
        self._pending: dict[int, Result] = {}  # results not yet given out, by position
        self._slots_held: dict[int, Any] = {}  # position -> slot, SlotClaim or None
        self._exhausted = False
        self._next_pos = progress.yielded
        self._deferred: Exception | None = None  # raised by a refill on delivery
        # Thread workers take their task's slot when they start writing it (SlotClaim)
        self._claims = settings.worker_kind == "thread"
        # Without workers a task runs as it is submitted: a refill would load the next
        # batch before this one is returned
        self._refill_on_delivery = settings.num_workers > 0

    def next_result(self) -> tuple[Result, Any] | None:
        """The next result and its task's slot; None once every task's result was taken.

        With workers, the place the result frees goes to one at once, as torch refills
        on delivery: waiting for the caller's next call would leave the worker that
        made this batch idle while the caller uses it.  What that refill raises (the
        sampler's error, a dead worker) comes at the next call, so this batch is not
        lost to it.  Without workers (``num_workers=0``) each batch is loaded when it
        is asked for, as torch does.
        """
        if self._deferred is not None:
            exc, self._deferred = self._deferred, None
            raise exc
        self._fill()
        result = self._take()
        if result is None:
            return None
        slot = self._slots.settle(self._slots_held.pop(result.position))
        if self._refill_on_delivery:
            try:
                self._fill()
            except Exception as exc:  # re-raised as it was, at the next call
                self._deferred = exc
        return result, slot

    def _fill(self) -> None:
        limit = self._settings.max_in_flight(self._slots.layout)
        while not self._exhausted and len(self._slots_held) < limit:
            pos = self._next_pos
            try:
                index = next(self._order)
            except StopIteration:
                self._exhausted = True
                return
            self._next_pos += 1
            if pos in self._progress.ahead:
                continue  # yielded before the resume (in_order=False)
            worker = self._progress.assign(pos, iterable=self._settings.sampling.iterable)
            if worker is None:
                self._exhausted = True
                return
            if self._claims:
                held, layout = self._slots.claim(index)
                handle = held
            else:
                held, layout = self._slots.acquire(index)
                handle = self._exec.slot_handle(held)
            self._slots_held[pos] = held
            self._exec.submit(worker, Task(pos, index, handle, layout))

    def _take(self) -> Result | None:
        while True:
            if self._settings.in_order:
                head = min(self._slots_held, default=None)
                if head is not None and head in self._pending:
                    return self._pending.pop(head)
            elif self._pending:
                return self._pending.pop(next(iter(self._pending)))
            if not self._slots_held:
                return None
            result: Result = self._exec.get(timeout_s=self._settings.timeout_s)
            self._pending[result.position] = result

    def close(self) -> None:
        """Release the slots of tasks still in flight (their results are dropped)."""
        for held in self._slots_held.values():
            self._slots.release(self._slots.settle(held))
        self._slots_held.clear()
        self._pending.clear()
