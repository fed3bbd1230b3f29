"""The tasks of one DataLoader epoch that are handed to workers and not yet yielded.

Task ``p`` of a map-style epoch goes to worker ``p % num_workers``, the assignment torch
uses; an iterable dataset's tasks go round-robin over the workers whose stream has not
ended (the epoch's :class:`~._state.EpochProgress` decides). Results come back in any
order and are given out in task order, or as they arrive with ``in_order=False``.
Thread workers may instead share batches, claiming their samples (:mod:`._claim_flight`).
"""

from __future__ import annotations

from typing import Any

from ._claim_flight import ClaimFlight
from ._claims import cancel, take
from ._sampling import EpochOrder
from ._settings import LoaderSettings
from ._slots import LoaderSlots
from ._state import KEY_W_RNG, EpochProgress
from ._tasks import Result, Task

__all__ = ["TasksInFlight"]

_ON_BOARD = object()  # in _slots_held: a shared batch (its slot is the board's)


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
        self._slots_held: dict[int, Any] = {}  # position -> slot (or None, or _ON_BOARD)
        self._exhausted = False
        self._next_pos = progress.yielded
        self.claims = ClaimFlight(settings, executor, slots)

    def next_result(self) -> tuple[Result, Any] | None:
        """The next result and its task's slot, submitting more tasks first; None once
        every task's result was taken."""
        self._fill()
        result = self._take()
        if result is None:
            return None
        return result, self._slots_held.pop(result.position)

    def _fill(self) -> None:
        usual = self._settings.max_in_flight(self._slots.layout)
        limit = self.claims.limit(usual)
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
            if self.claims.takes(index):
                assert self.claims.board is not None
                self.claims.board.add(pos, index, worker)
                self._slots_held[pos] = _ON_BOARD
                limit = self.claims.limit(usual)
                continue
            if self.claims.board is not None:  # a batch the board cannot take
                self._read_again(self.claims.end(self._keep))
            self._submit(pos, index, worker)

    def _submit(self, pos: int, index: Any, worker: int) -> None:
        slot, layout = self._slots.acquire(index)
        self._slots_held[pos] = slot
        self._exec.submit(worker, Task(pos, index, self._exec.slot_handle(slot), layout))

    def _read_again(self, batches: list[Any]) -> None:
        """Shared batches not yielded, read again whole by their owners, in order."""
        for batch in batches:
            self._submit(batch.position, batch.index, batch.owner)

    def _keep(self, result: Result) -> None:
        if result.position >= 0:
            self.claims.note(result)
            self._pending[result.position] = result

    def _take(self) -> Result | None:
        while True:
            if self._settings.in_order:
                head = min(self._slots_held, default=None)
                if head is not None and self._slots_held[head] is _ON_BOARD:
                    result = self._take_shared(head)
                    if result is not None:
                        return result
                    continue
                if head is not None and head in self._pending:
                    return self._pending.pop(head)
            elif self._pending:
                return self._pending.pop(next(iter(self._pending)))
            if not self._slots_held:
                self.claims.end(self._keep)
                return None
            self._keep(self._exec.get(timeout_s=self._settings.timeout_s))

    def _take_shared(self, position: int) -> Result | None:
        """The shared batch at ``position``; None when it is to be read again (a sample
        drew random numbers): then every shared batch is, by its owner."""
        board = self.claims.board
        assert board is not None
        batch = take(board, position, self._settings.timeout_s)
        result = batch.result
        if result is None or batch.drew:
            self._slots.release(cancel(batch))
            if batch.drew:
                self._slots.refuse_sharing = True
            self._read_again([batch, *self.claims.end(self._keep)])
            return None
        self._slots_held[position], batch.slot = batch.slot, None
        self._slots.batches_shared += 1
        # The owner's generators did not move: its state is what it was.
        result.rng = self._progress.workers[batch.owner].get(KEY_W_RNG)
        return result

    def close(self) -> None:
        """Release the slots of tasks still in flight (their results are dropped)."""
        self.claims.close()
        for slot in self._slots_held.values():
            if slot is not _ON_BOARD:
                self._slots.release(slot)
        self._slots_held.clear()
        self._pending.clear()
