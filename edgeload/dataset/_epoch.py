"""One pass over a DataLoader: hand tasks to workers, put results back in order.

Task ``p`` of a map-style epoch goes to worker ``p % num_workers``, the assignment torch
uses; an iterable dataset's tasks go round-robin over the workers whose stream has not
ended.  Each worker handles its tasks in order, so what it produces, and its random
state, depend only on the tasks before.  The state of an epoch is therefore small: the
epoch's random inputs, how many batches were yielded, and per worker the random state
(and for iterable datasets the samples drawn) as of its last batch that was yielded.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import TYPE_CHECKING, Any, Iterator

from ..errors import WorkerError, worker_exception
from ..pipeline.lifecycle import release_frames
from ._fetch import Result, Task, WorkerStart
from ._sampling import EpochOrder

if TYPE_CHECKING:
    from .loader import DataLoader

# Keys of the epoch part of the loader state.
KEY_YIELDED = "tasks_done"
KEY_AHEAD = "yielded_ahead"
KEY_WORKERS = "workers"
KEY_NEXT_WORKER = "next_worker"
KEY_W_RNG = "rng"
KEY_W_CONSUMED = "samples_drawn"
KEY_W_ENDED = "ended"


class EpochIterator(Iterator[Any]):
    """Iterates one epoch of ``loader``; built by ``DataLoader.__iter__``."""

    def __init__(
        self,
        loader: DataLoader[Any],
        order: EpochOrder,
        base_seed: int,
        *,
        resume: dict[str, Any] | None = None,
        shared_seed: int | None = None,
    ) -> None:
        self._loader = loader
        self._len_called = loader._len_called
        self._num_yielded = 0
        self._order = order
        self._base_seed = base_seed
        self._exec = loader._executor_for_epoch()
        # Taken now: once the pass ends, the pool releases its process objects.
        self._worker_handles = list(getattr(self._exec, "workers", []))
        n = max(1, loader._num_workers_resolved)
        self._n = n
        self._yielded = 0
        self._ahead: set[int] = set()
        self._next_pos = 0
        self._pending: dict[int, Result] = {}
        self._in_flight: dict[int, Any] = {}  # position -> slot (or None)
        self._worker_states: list[dict[str, Any]] = [{} for _ in range(n)]
        self._ended_workers: set[int] = set()
        self._cycle_next = 0
        # The worker after the one whose batch was yielded last: where a resume starts.
        self._resume_next = 0
        self._exhausted = False
        self._done = False
        self.skipped = 0
        self._shared_seed = shared_seed
        starts = [WorkerStart(base_seed, shared_seed=shared_seed) for _ in range(n)]
        if resume is not None:
            starts = self._apply_resume(resume)
        for w, start in enumerate(starts):
            self._exec.start_worker(w, start)

    def _apply_resume(self, resume: dict[str, Any]) -> list[WorkerStart]:
        saved = resume.get(KEY_WORKERS, [])
        if len(saved) not in (0, self._n):
            raise ValueError(
                f"the saved loader state has {len(saved)} workers but this loader runs "
                f"{self._n}; pass num_workers={len(saved)} (threads or processes, either "
                "resumes exactly)"
            )
        self._yielded = int(resume[KEY_YIELDED])
        self._ahead = {int(p) for p in resume.get(KEY_AHEAD, [])}
        self._next_pos = self._yielded
        self._cycle_next = self._resume_next = int(resume.get(KEY_NEXT_WORKER, 0))
        starts = []
        for w, ws in enumerate(saved or [{}] * self._n):
            self._worker_states[w] = dict(ws)
            if ws.get(KEY_W_ENDED):
                self._ended_workers.add(w)
            starts.append(
                WorkerStart(
                    self._base_seed,
                    shared_seed=self._shared_seed,
                    rng=None if self._loader._sampling.iterable else ws.get(KEY_W_RNG),
                    skip_samples=int(ws.get(KEY_W_CONSUMED, 0)),
                    ended=bool(ws.get(KEY_W_ENDED, False)),
                )
            )
        return starts

    def state(self) -> dict[str, Any]:
        """The JSON-ready state after the batches yielded so far."""
        return {
            KEY_YIELDED: self._yielded,
            KEY_AHEAD: sorted(self._ahead),
            KEY_NEXT_WORKER: self._resume_next,
            KEY_WORKERS: [dict(w) for w in self._worker_states],
        }

    def __len__(self) -> int:
        return len(self._loader)

    @property
    def _workers(self) -> list[Any]:
        """torch's name for the iterator's workers (some code joins them after ``del``)."""
        return list(self._worker_handles)

    def __iter__(self) -> EpochIterator:
        return self

    # Dispatch --------------------------------------------------------------------

    def _pick_worker(self, position: int) -> int | None:
        if not self._loader._sampling.iterable:
            return position % self._n
        for _ in range(self._n):
            w = self._cycle_next
            self._cycle_next = (w + 1) % self._n
            if w not in self._ended_workers:
                return w
        return None

    def _fill(self) -> None:
        limit = self._loader._max_in_flight()
        while not self._exhausted and len(self._in_flight) < limit:
            pos = self._next_pos
            try:
                index = next(self._order)
            except StopIteration:
                self._exhausted = True
                return
            self._next_pos += 1
            if pos in self._ahead:
                continue  # yielded before the resume (in_order=False)
            worker = self._pick_worker(pos)
            if worker is None:
                self._exhausted = True
                return
            slot, layout = self._loader._slots.acquire(index)
            self._in_flight[pos] = slot
            self._exec.submit(worker, Task(pos, index, self._exec.slot_handle(slot), layout))

    # Collect ---------------------------------------------------------------------

    def _wait_result(self) -> Result:
        result: Result = self._exec.get(timeout_s=self._loader.timeout or None)
        return result

    def _take(self) -> Result | None:
        in_order = self._loader.in_order
        while True:
            if in_order:
                head = min(self._in_flight, default=None)
                if head is not None and head in self._pending:
                    return self._pending.pop(head)
            elif self._pending:
                return self._pending.pop(next(iter(self._pending)))
            if not self._in_flight:
                return None
            result = self._wait_result()
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
                self._finish()
                raise StopIteration
            slot = self._in_flight.pop(result.position)
            batch = self._handle(result, slot)
            if batch is not _NOTHING:
                self._num_yielded += 1
                self._warn_over_length()
                return batch

    def _warn_over_length(self) -> None:
        """torch's warning when an IterableDataset yields more than its ``__len__``."""
        if (
            not self._loader._sampling.iterable
            or self._len_called is None
            or self._num_yielded <= self._len_called
        ):
            return
        text = (
            f"Length of IterableDataset {self._loader.dataset} was reported to be "
            f"{self._len_called}(when accessing len(dataloader)), but {self._num_yielded} "
            "samples have been fetched. "
        )
        if self._loader._num_workers_resolved > 0:
            text += (
                "For multiprocessing data-loading, this could be caused by not properly "
                "configuring the IterableDataset replica at each worker (shard it with "
                "get_worker_info()). Please see https://pytorch.org/docs/stable/data.html"
                "#torch.utils.data.IterableDataset for examples."
            )
        warnings.warn(text, stacklevel=3)

    def _handle(self, result: Result, slot: Any) -> Any:
        loader = self._loader
        w = result.worker_id
        if result.error is not None:
            loader._slots.release(slot)
            index, message, text = result.error
            kind = loader.worker_kind_resolved
            where = "the main thread" if kind == "main" else f"DataLoader worker {kind} {w}"
            name = message.split(":", 1)[0]
            raise worker_exception(
                result.exc_type,
                f"Caught {name} in {where} while loading sample {index!r} ({message}).\n"
                f"Original {text}",
                exc=result.exc,
                index=index,
                worker=f"{kind}-worker-{w}",
                traceback_text=text,
            ) from result.exc
        ws = self._worker_states[w]
        ws[KEY_W_RNG] = result.rng
        ws[KEY_W_CONSUMED] = result.consumed
        if result.ended:
            loader._slots.release(slot)
            ws[KEY_W_ENDED] = True
            self._ended_workers.add(w)
            self._mark_yielded(result.position)
            return _NOTHING
        if loader._sampling.iterable:
            self._resume_next = (w + 1) % self._n
        for index, message in result.skipped:
            self.skipped += 1
            loader._count_skip(index, message, epoch_skips=self.skipped)
        if result.empty:
            loader._slots.release(slot)
            self._mark_yielded(result.position)
            return _NOTHING
        if result.layout is not None:
            loader._slots.offer_layout(result.layout)
        from_slot = slot is not None and result.rows > 0
        batch = loader._slots.finish(slot, result)
        self._mark_yielded(result.position)
        return loader._deliver(batch, from_slot=from_slot)

    def _mark_yielded(self, position: int) -> None:
        if position == self._yielded:
            self._yielded += 1
            while self._yielded in self._ahead:
                self._ahead.discard(self._yielded)
                self._yielded += 1
        else:
            self._ahead.add(position)

    def _finish(self) -> None:
        self._done = True
        self._loader._epoch_finished(self)

    def __del__(self) -> None:
        # The loader holds its iterator weakly: dropping an unfinished one ends its pass.
        if not getattr(self, "_done", True):  # False only once __init__ got far
            with contextlib.suppress(Exception):  # interpreter shutdown
                self._loader._iterator_dropped(self)
                self.close()

    def close(self) -> None:
        """Release the slots of tasks still in flight (their results are dropped)."""
        for slot in self._in_flight.values():
            self._loader._slots.release(slot)
        self._in_flight.clear()
        self._pending.clear()
        self._done = True


_NOTHING = object()
