"""One pass over a DataLoader: hand tasks to workers, put results back in order.

Task ``p`` of a map-style epoch goes to worker ``p % num_workers``, the assignment torch
uses; an iterable dataset's tasks go round-robin over the workers whose stream has not
ended.  Each worker handles its tasks in order, so what it produces, and its random
state, depend only on the tasks before (see :mod:`._state`).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from typing import Any, Iterator

from ..errors import WorkerError, worker_exception
from ..pipeline.lifecycle import release_frames
from ._device import pin_batch
from ._fetch import Result, Task, WorkerStart
from ._sampling import EpochOrder
from ._settings import LoaderSettings
from ._slots import LoaderSlots
from ._state import KEY_W_CONSUMED, KEY_W_ENDED, KEY_W_RNG, EpochProgress, LoaderState


class EpochIterator(Iterator[Any]):
    """Iterates one epoch; built by ``DataLoader.__iter__``.

    Args:
        settings: the epoch's settings; state: the loader's counters, which it adds to.
        executor, slots: where tasks run, and the slots their batches go into.
        order: the epoch's task order; base_seed, shared_seed: the epoch's seeds.
        resume: the progress part of a saved state, to continue from.
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
        base_seed: int,
        shared_seed: int | None,
        resume: dict[str, Any] | None,
        length: Callable[[], int],
        len_called: int | None,
        on_end: Callable[[EpochIterator, bool], None],
    ) -> None:
        self._settings, self._state, self._exec, self._slots = settings, state, executor, slots
        self._order = order
        self._length, self._len_called, self._on_end = length, len_called, on_end
        # Taken now: once the pass ends, the pool releases its process objects.
        self._worker_handles = list(getattr(executor, "workers", []))
        self._n = max(1, settings.num_workers)
        self.progress = EpochProgress(self._n)
        self._num_yielded = 0
        self._pending: dict[int, Result] = {}
        self._in_flight: dict[int, Any] = {}  # position -> slot (or None)
        self._exhausted = self._done = False
        self.skipped = 0
        saved: list[dict[str, Any]] = [{} for _ in range(self._n)]
        if resume is not None:
            saved = self.progress.load(resume)
        self._next_pos = self.progress.yielded
        self._cycle_next = self.progress.resume_next
        iterable = settings.sampling.iterable
        for w, ws in enumerate(saved):
            start = WorkerStart(
                base_seed,
                shared_seed=shared_seed,
                rng=None if iterable else ws.get(KEY_W_RNG),
                skip_samples=int(ws.get(KEY_W_CONSUMED, 0)),
                ended=bool(ws.get(KEY_W_ENDED, False)),
            )
            executor.start_worker(w, start)

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

    def _pick_worker(self, position: int) -> int | None:
        if not self._settings.sampling.iterable:
            return position % self._n
        for _ in range(self._n):
            w = self._cycle_next
            self._cycle_next = (w + 1) % self._n
            if w not in self.progress.ended:
                return w
        return None

    def _fill(self) -> None:
        limit = self._settings.max_in_flight(self._slots.layout)
        while not self._exhausted and len(self._in_flight) < limit:
            pos = self._next_pos
            try:
                index = next(self._order)
            except StopIteration:
                self._exhausted = True
                return
            self._next_pos += 1
            if pos in self.progress.ahead:
                continue  # yielded before the resume (in_order=False)
            worker = self._pick_worker(pos)
            if worker is None:
                self._exhausted = True
                return
            slot, layout = self._slots.acquire(index)
            self._in_flight[pos] = slot
            self._exec.submit(worker, Task(pos, index, self._exec.slot_handle(slot), layout))

    def _take(self) -> Result | None:
        while True:
            if self._settings.in_order:
                head = min(self._in_flight, default=None)
                if head is not None and head in self._pending:
                    return self._pending.pop(head)
            elif self._pending:
                return self._pending.pop(next(iter(self._pending)))
            if not self._in_flight:
                return None
            result: Result = self._exec.get(timeout_s=self._settings.timeout_s)
            self._pending[result.position] = result

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
            self._fill()
            result = self._take()
            if result is None:
                self._done = True
                self._on_end(self, True)
                raise StopIteration
            slot = self._in_flight.pop(result.position)
            batch = self._handle(result, slot)
            if batch is not _NOTHING:
                self._num_yielded += 1
                if self._settings.sampling.iterable:
                    _warn_over_length(self._settings, self._len_called, self._num_yielded)
                return batch

    def _handle(self, result: Result, slot: Any) -> Any:
        w, slots = result.worker_id, self._slots
        if result.error is not None:
            slots.release(slot)
            raise _worker_error(result, result.error, self._settings.worker_kind) from result.exc
        self.progress.record(w, result.rng, result.consumed)
        if result.ended:
            slots.release(slot)
            self.progress.end_worker(w)
            self.progress.mark_yielded(result.position)
            return _NOTHING
        if self._settings.sampling.iterable:
            self.progress.resume_next = (w + 1) % self._n
        for index, message in result.skipped:
            self.skipped += 1
            self._state.count_skip(
                index, message, epoch_skips=self.skipped, max_skips=self._settings.max_skips
            )
        if result.empty:
            slots.release(slot)
            self.progress.mark_yielded(result.position)
            return _NOTHING
        if result.layout is not None:
            slots.offer_layout(result.layout)
        from_slot = slot is not None and result.rows > 0
        batch = slots.finish(slot, result)
        self.progress.mark_yielded(result.position)
        self._state.counters["batches"] += 1
        if self._settings.choice.pin_memory and not (from_slot and slots.page_locked):
            return pin_batch(batch, self._settings.engine)
        return batch

    def __del__(self) -> None:
        # The loader holds its iterator weakly: dropping an unfinished one ends its pass.
        if not getattr(self, "_done", True):  # False only once __init__ got far
            with contextlib.suppress(Exception):  # interpreter shutdown
                self._on_end(self, False)
                self.close()

    def close(self) -> None:
        """Release the slots of tasks still in flight (their results are dropped)."""
        for slot in self._in_flight.values():
            self._slots.release(slot)
        self._in_flight.clear()
        self._pending.clear()
        self._done = True


_NOTHING = object()


def _worker_error(result: Result, error: tuple[Any, str, str], kind: str) -> WorkerError:
    """The exception for a task whose loading raised, as torch words it."""
    index, message, text = error
    w = result.worker_id
    where = "the main thread" if kind == "main" else f"DataLoader worker {kind} {w}"
    name = message.split(":", 1)[0]
    return worker_exception(
        result.exc_type,
        f"Caught {name} in {where} while loading sample {index!r} ({message}).\nOriginal {text}",
        exc=result.exc,
        index=index,
        worker=f"{kind}-worker-{w}",
        traceback_text=text,
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
