"""Batches that thread workers fill together: each claims the next sample of the oldest.

With task = batch, two workers each write their own batch and finish out of order (the
one done with batch k+2 waits while the other still writes k+1), so every batch in
flight holds a slot: five touched in a plain loop.  Here each batch in flight has a
cursor of unclaimed rows; a free worker takes the next row of the oldest batch that
has one and writes the sample into that batch's row.  Both workers finish the same
batch at about the same time, in order, so the user's batch and the one being filled
are all the slots a plain loop touches (see ``docs/performance.md``).

Only thread workers share batches (a :class:`ClaimBoard` is plain shared memory), and
only batches of the default collate into slots of a known layout.  The board keeps the
rows' bookkeeping under one lock; writing into a batch's memory takes that batch's own
lock, which ``cancel`` takes too, so nothing writes into a slot after it is given back.
The main thread waits on a :class:`~edgeload.pipeline.lifecycle.Wakeups`, never on a
Condition (issue #13: Ctrl-C inside Condition's Python code can leave its lock held).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import WorkerTimeout
from ..pipeline.lifecycle import POLL_INTERVAL_S, Wakeups
from ._collate import SlotMap
from ._tasks import Result

# A batch's lock is held for one row's copy (or a batch's completion); a wait this long
# means a worker is stuck, and the caller says so instead of hanging.
BATCH_LOCK_TIMEOUT_S = 30.0


class ClaimedBatch:
    """One batch in flight: which rows are claimed, written, skipped, and its memory."""

    def __init__(self, position: int, index: list[Any], owner: int) -> None:
        self.position = position
        self.index = index
        self.owner = owner
        """``position % num_workers``: the worker torch would give it (its results and
        the saved state name this worker)."""
        self.next_row = 0
        """Rows 0 .. next_row - 1 are claimed."""
        self.busy = 0
        """Claimed rows whose worker has not reported yet."""
        self.reading: dict[int, str] = {}
        """Row -> the thread reading it (named by a timeout)."""
        self.halted = False
        """A row failed or drew random numbers: its other rows are not claimed."""
        self.lock = threading.Lock()
        """Held to set up ``buf``, write a row, complete the batch or cancel it."""
        self.setting_up = False
        """A worker is getting the batch its memory (the others wait for it)."""
        self.slot: Any = None
        self.buf: Any = None
        """The slot's array, or fresh memory when no slot came free (the user keeps batches)."""
        self.views: Any = None
        self.written: set[int] = set()
        self.extras: dict[int, Any] = {}
        """Samples that do not fit the layout, by row: the batch goes to default_collate."""
        self.skipped: list[tuple[int, tuple[Any, str]]] = []
        """(row, (index, error)) of samples skipped because their loading raised."""
        self.failure: Any = None
        self.failed_index: Any = None
        self.failed_row = 0
        self.drew = False
        """A row drew from its worker's random generators: the batch is read again by
        its owner (see :mod:`._claim_rows`)."""
        self.cancelled = False
        self.result: Result | None = None
        self.finished = False
        """Completed: ``result`` is final (None: the batch is read again)."""

    def locked(self) -> Any:
        """The batch's lock, taken with a timeout (a context manager)."""
        return _Held(self.lock, f"batch {self.position}")


class _Held:
    def __init__(self, lock: threading.Lock, what: str) -> None:
        self._lock, self._what = lock, what

    def __enter__(self) -> None:
        if not self._lock.acquire(timeout=BATCH_LOCK_TIMEOUT_S):
            raise RuntimeError(
                f"edgeload: {self._what} stayed locked for {BATCH_LOCK_TIMEOUT_S} s; a "
                "thread worker is stuck writing it (report this with the dataset's type)"
            )

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


class ClaimBoard:
    """The batches of one epoch that thread workers fill together, oldest first.

    Args:
        layout: the slots' layout (every batch here has ``layout.batch_size`` rows).
        acquire_slot: called by a worker, outside any lock, with a ``should_stop()``
            predicate, for a batch's memory: returns a slot, None for fresh memory, or
            raises ClosedError (told to stop, or the pool closed).
        release_slot: gives back a slot a cancelled batch no longer needs.
        num_workers: the workers that claim rows (each is woken on news).
    """

    def __init__(
        self,
        layout: SlotMap,
        *,
        acquire_slot: Callable[[Callable[[], bool]], Any],
        release_slot: Callable[[Any], None],
        num_workers: int,
    ) -> None:
        self.layout = layout
        self.acquire_slot, self.release_slot = acquire_slot, release_slot
        self._num_workers = num_workers
        self._lock = threading.Lock()
        self._batches: dict[int, ClaimedBatch] = {}
        self._open: list[ClaimedBatch] = []  # batches with rows to claim, oldest first
        self._work = Wakeups()
        self._done = Wakeups()
        self.stopped = False
        """No more rows are claimed (the epoch ended, a row drew, close)."""
        self.workers: dict[int, Any] = {}
        """Each worker's info and its random state when it began claiming (see
        :func:`~._claim_rows.run_claims`); rows are claimed once all are here."""
        self.loop_error: BaseException | None = None

    def add(self, position: int, index: list[Any], owner: int) -> None:
        """A batch to fill (positions come in order)."""
        batch = ClaimedBatch(position, index, owner)
        with self._lock:
            self._batches[position] = batch
            self._open.append(batch)
        self._wake_workers()

    def __len__(self) -> int:
        return len(self._batches)

    def register(self, worker: int, rng: Any) -> None:
        """Worker ``worker`` has read its last whole batch and begins claiming."""
        with self._lock:
            self.workers[worker] = rng
        self._wake_workers()

    def claim(self, stop: threading.Event) -> tuple[ClaimedBatch, int] | None:
        """The next row to read, of the oldest batch with one; None once stopped."""
        while not stop.is_set():
            with self._lock:
                if self.stopped:
                    return None
                # Another worker's row is read as that worker (its generators), so not
                # before it has finished its own whole batches.
                ready = len(self.workers) >= self._num_workers
                while (
                    ready
                    and self._open
                    and (self._open[0].halted or self._open[0].next_row >= len(self._open[0].index))
                ):
                    self._open.pop(0)
                if ready and self._open:
                    batch = self._open[0]
                    row = batch.next_row
                    batch.next_row += 1
                    batch.busy += 1
                    batch.reading[row] = threading.current_thread().name
                    return batch, row
            self._work.wait(POLL_INTERVAL_S)
        return None

    def first_without_memory(self, batch: ClaimedBatch) -> bool:
        """Whether every older batch has its memory: slots go out in batch order, or a
        later batch could take the last free slot while the one the user waits for
        waits for it."""
        with self._lock:
            return all(
                b.views is not None or b.finished or b.cancelled
                for p, b in self._batches.items()
                if p < batch.position
            )

    def halt(self, batch: ClaimedBatch, *, drew: bool = False) -> None:
        """Claim no more rows of ``batch`` (one failed); with ``drew``, of any batch."""
        with self._lock:
            batch.halted = True
            if drew:
                batch.drew = True
                self.stopped = True
        if drew:
            self._wake_workers()

    def row_done(self, batch: ClaimedBatch, row: int) -> bool:
        """A claimed row was reported; True (once) when the caller must complete the batch."""
        with self._lock:
            batch.busy -= 1
            batch.reading.pop(row, None)
            rows_left = batch.next_row < len(batch.index) and not batch.halted
            return batch.busy == 0 and not (rows_left and not self.stopped)

    def completed(self, batch: ClaimedBatch, result: Result | None) -> None:
        """Hand ``result`` (its ``position`` is the batch's; None: read it again) to the
        main thread."""
        with self._lock:
            batch.result, batch.finished = result, True
        self._done.post(None)

    def failed(self, exc: BaseException) -> None:
        """A claim loop raised outside the dataset: the main thread re-raises it."""
        with self._lock:
            self.loop_error = exc
            self.stopped = True
        self._done.post(None)
        self._wake_workers()

    def stop(self) -> None:
        """Claim no more rows; workers finish the rows they hold and end their loops."""
        with self._lock:
            self.stopped = True
        self._wake_workers()

    def remaining(self) -> list[ClaimedBatch]:
        """The batches not taken, in order (after ``stop`` and the loops' end)."""
        with self._lock:
            batches = [self._batches[p] for p in sorted(self._batches)]
            self._batches.clear()
            self._open.clear()
        return batches

    def _wake_workers(self) -> None:
        for _ in range(self._num_workers):
            self._work.post(None)


def take(board: ClaimBoard, position: int, timeout_s: float | None) -> ClaimedBatch:
    """Wait for batch ``position`` of ``board`` to be complete and remove it (the main
    thread).

    Raises:
        WorkerTimeout: nothing completed it within ``timeout_s``.
        RuntimeError: a worker's claim loop failed (its error is the cause).
    """
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        with board._lock:
            batch = board._batches[position]
            if batch.result is not None or batch.finished:
                del board._batches[position]
                return batch
            error = board.loop_error
            if error is None and board.stopped and batch.busy == 0:
                # Stopped before its rows were all claimed: it is read again.
                del board._batches[position]
                return batch
        if error is not None:
            raise RuntimeError(f"edgeload: a thread worker's claim loop failed: {error}") from (
                error
            )
        left = POLL_INTERVAL_S if deadline is None else deadline - time.monotonic()
        if left <= 0:
            with board._lock:
                row, worker = min(batch.reading.items(), default=(None, ""))
            where = "" if row is None else f" (row {row}: sample {batch.index[row]!r})"
            raise WorkerTimeout(
                f"DataLoader timed out after {timeout_s} seconds with no batch from its "
                f"thread workers; a worker is stuck in the dataset (or raise timeout=): "
                f"{worker} on dataset index {batch.index}{where}",
                index=position,
                worker=worker or None,
            )
        board._done.wait(min(left, POLL_INTERVAL_S))


def cancel(batch: ClaimedBatch) -> Any:
    """Stop ``batch``'s writers for good; returns its slot (None: none) to give back."""
    with batch.locked():
        batch.cancelled = True
        slot, batch.slot, batch.views, batch.buf = batch.slot, None, None, None
    return slot
