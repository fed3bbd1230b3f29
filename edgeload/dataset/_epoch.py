"""One pass over a DataLoader: torch's iterator, turning each task's result into a batch.

The tasks themselves go out and come back in order through :mod:`._in_flight`. Each
worker handles its tasks in order, so what it produces, and its random state, depend
only on the tasks before (see :mod:`._state`).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from typing import Any, Iterator

from ..errors import WorkerError
from ..pipeline.failure import Failure, worker_error
from ..pipeline.lifecycle import release_frames
from ._in_flight import TasksInFlight
from ._sampling import EpochOrder
from ._settings import LoaderSettings
from ._slots import LoaderSlots
from ._state import EpochProgress, LoaderState
from ._worker import Result


class EpochIterator(Iterator[Any]):
    """Iterates one epoch; built by ``DataLoader.__iter__``.

    Args:
        settings: the epoch's settings; state: the loader's counters, which it adds to.
        executor, slots: where tasks run (each worker already started), and the slots
            their batches go into.
        order: the epoch's task order; progress: where in it the epoch is (a resume
            starts part-way).
        length: ``len(loader)``; len_called: what it returned before this epoch.
        on_end: called with this iterator and whether the epoch was finished (False:
            it was dropped unfinished), so the loader can stop or keep its workers.
    """

    def __init__(
        self,
        settings: LoaderSettings,
        state: LoaderState,
        *,
        executor: Any,
        slots: LoaderSlots,
        order: EpochOrder,
        progress: EpochProgress,
        length: Callable[[], int],
        len_called: int | None,
        on_end: Callable[[EpochIterator, bool], None],
    ) -> None:
        self._settings, self._state, self._slots = settings, state, slots
        self._order = order
        self._length, self._len_called, self._on_end = length, len_called, on_end
        # Taken now: once the pass ends, the pool releases its process objects.
        self._worker_handles = list(getattr(executor, "workers", []))
        self.progress = progress
        self._tasks = TasksInFlight(settings, executor, slots, order, progress)
        self._num_yielded = 0
        self._done = False
        self.skipped = 0

    @property
    def done(self) -> bool:
        """The epoch ended, or the iterator was closed."""
        return self._done

    def order_state(self) -> dict[str, Any]:
        """The epoch's random inputs (see :class:`~._sampling.EpochOrder`)."""
        return dict(self._order.state)

    def __len__(self) -> int:
        return self._length()

    @property
    def _workers(self) -> list[Any]:
        """torch's name for the iterator's workers (some code joins them after ``del``)."""
        return list(self._worker_handles)

    def __iter__(self) -> EpochIterator:
        return self

    def __next__(self) -> Any:
        try:
            return self._next()
        except WorkerError as exc:
            # A kept error must not keep this iterator, the loader and its shared
            # memory alive: a dead worker's segments go when the loader is dropped.
            release_frames(exc)
            del self
            raise

    def _next(self) -> Any:
        while True:
            if self._done:
                raise StopIteration
            taken = self._tasks.next_result()
            if taken is None:
                self._done = True
                self._on_end(self, True)
                raise StopIteration
            batch = self._handle(*taken)
            if batch is not _NOTHING:
                self._num_yielded += 1
                if self._settings.sampling.iterable:
                    _warn_over_length(self._settings, self._len_called, self._num_yielded)
                return batch

    def _handle(self, result: Result, slot: Any) -> Any:
        slots = self._slots
        if result.failure is not None:
            slots.release(slot)
            raise _worker_error(result, result.failure, self._settings.worker_kind) from (
                result.failure.exc
            )
        ended = self.progress.record(result, iterable=self._settings.sampling.iterable)
        if ended:  # the worker's stream ended: nothing to yield
            slots.release(slot)
            return _NOTHING
        self.skipped = self._state.count_skips(
            result.skipped, epoch_skips=self.skipped, max_skips=self._settings.max_skips
        )
        if result.empty:
            slots.release(slot)
            self.progress.mark_yielded(result.position)
            return _NOTHING
        if result.layout is not None:
            slots.offer_layout(result.layout)
        batch = slots.finish(slot, result, pin=self._settings.choice.pin_memory)
        self.progress.mark_yielded(result.position)
        self._state.counters["batches"] += 1
        return batch

    def __del__(self) -> None:
        # The loader holds its iterator weakly: dropping an unfinished one ends its pass.
        if not getattr(self, "_done", True):  # False only once __init__ got far
            with contextlib.suppress(Exception):  # interpreter shutdown
                self._on_end(self, False)
                self.close()

    def close(self) -> None:
        """Release the slots of tasks still in flight (their results are dropped)."""
        self._tasks.close()
        self._done = True


_NOTHING = object()


def _worker_error(result: Result, failure: Failure, kind: str) -> WorkerError:
    """The exception for a task whose loading raised, as torch words it."""
    index, w = result.failed_index, result.worker_id
    where = "the main thread" if kind == "main" else f"DataLoader worker {kind} {w}"
    return worker_error(
        failure,
        f"Caught {failure.name} in {where} while loading sample {index!r} "
        f"({failure.name}: {failure.message}).",
        index=index,
        worker=f"{kind}-worker-{w}",
        as_original=True,
    )


def _warn_over_length(settings: LoaderSettings, len_called: int | None, yielded: int) -> None:
    """torch's warning when an IterableDataset yields more than its ``__len__``."""
    if len_called is None or yielded <= len_called:
        return
    text = (
        f"Length of IterableDataset {settings.dataset} was reported to be "
        f"{len_called}(when accessing len(dataloader)), but {yielded} "
        "samples have been fetched. "
    )
    if settings.num_workers > 0:
        text += (
            "For multiprocessing data-loading, this could be caused by not properly "
            "configuring the IterableDataset replica at each worker (shard it with "
            "get_worker_info()). Please see https://pytorch.org/docs/stable/data.html"
            "#torch.utils.data.IterableDataset for examples."
        )
    warnings.warn(text, stacklevel=3)
