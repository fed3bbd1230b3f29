"""How a worker reads one task's samples: by index, or from its stream of an iterable.

With the default collate and a map-style dataset the samples go straight into the
task's slot (or fresh memory of the same layout) as they are read; a worker's first
batch learns that layout from its first sample.  Otherwise they come back as a list
for the collate step.  A sample whose loading raises is skipped and reported
(``on_error="skip"``) or ends the task as a :class:`SampleError`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np

from . import _collate
from ._slots import SlotClaim
from ._tasks import FetchSpec, Result, Task, WorkerStart


class SampleError(Exception):
    """Loading sample ``index`` raised ``exc``: the task fails with it."""

    def __init__(self, index: Any, exc: BaseException) -> None:
        super().__init__(index)
        self.index = index
        self.exc = exc


class SampleReader:
    """Reads tasks' samples from one worker's dataset object, in task order."""

    def __init__(self, spec: FetchSpec, dataset: Any, worker_id: int) -> None:
        self._spec = spec
        self._dataset = dataset
        self._stream = IterableStream(spec, dataset, worker_id)
        self.slot_map: _collate.SlotMap | None = None
        """The layout of fixed-size batches, once the first batch has shown it."""
        self.planned = False
        """Whether a first sample has decided ``slot_map`` (None: samples unsuited)."""

    @property
    def consumed(self) -> int:
        """Iterable datasets: samples drawn from the stream this epoch."""
        return self._stream.consumed

    def open(self, start: WorkerStart) -> None:
        """Open the dataset's stream for an epoch and skip what a resumed run drew."""
        self._stream.open(start)

    def read(self, task: Task, result: Result) -> list[Any] | None:
        """The task's samples, or None when they are already in ``result`` (written
        into the slot, or the stream ended)."""
        if self._can_stream(task):
            slot_map = task.layout or self.slot_map
            if slot_map is not None:
                return self._write(task, result, slot_map, self._samples(task, result))
            if not self.planned and isinstance(task.index, list):
                return self._read_first(task, result)
        spec = self._spec
        if spec.iterable:
            return self._stream.read(task, result)
        if not spec.auto_collation:
            sample = self._one(task.index, result)
            return [] if sample is _SKIPPED else [sample]
        getitems = getattr(self._dataset, "__getitems__", None)
        if getitems and not spec.skip_errors:
            try:
                return list(getitems(task.index))
            except Exception as exc:
                raise SampleError(task.index, exc) from exc
        return list(self._samples(task, result))

    def _can_stream(self, task: Task) -> bool:
        """Whether this task's samples may be written as they are read (given a layout)."""
        spec = self._spec
        slot_map = task.layout or self.slot_map
        return not (
            spec.iterable
            or not spec.auto_collation
            or spec.collate_fn is not None
            or (getattr(self._dataset, "__getitems__", None) and not spec.skip_errors)
            or (slot_map is not None and len(task.index) > slot_map.batch_size)
        )

    def _samples(self, task: Task, result: Result) -> Iterator[Any]:
        for index in task.index:
            sample = self._one(index, result)
            if sample is not _SKIPPED:
                yield sample

    def _read_first(self, task: Task, result: Result) -> list[Any] | None:
        """The worker's first batch: its first sample decides the layout (sent back in
        ``result.layout`` for the loader's slots), the rest are written as they come.

        Holding a whole batch of samples in a list first would leave that peak (a batch's
        size) in the worker thread's malloc arena for the rest of the run.
        """
        samples = self._samples(task, result)
        first = next(samples, _SKIPPED)
        if first is _SKIPPED:
            return []  # all skipped: the next batch decides
        self.planned = True
        layout = self.slot_map = result.layout = _collate.plan_slot_map(first, len(task.index))
        if layout is None:
            return [first, *samples]  # not fixed-size arrays: default_collate
        return self._write(task, result, layout, itertools.chain([first], samples))

    def _write(
        self, task: Task, result: Result, slot_map: _collate.SlotMap, samples: Iterator[Any]
    ) -> list[Any] | None:
        """Write ``samples`` straight into the slot (or fresh memory): no list of them.

        Returns None when the batch is complete in memory (``result.rows`` for a slot,
        ``result.data`` otherwise), or the samples for ``default_collate`` when one does
        not fit the layout (the rows written so far are rebuilt as they were).
        """
        slot = task.slot.take() if isinstance(task.slot, SlotClaim) else task.slot
        if slot is None:
            buf = np.empty(slot_map.nbytes, np.uint8)
        elif isinstance(slot, np.ndarray):
            buf = slot
        else:
            buf = _attach(slot)
        views = _collate.batch_views(slot_map, buf)
        rows = 0
        for sample in samples:
            if _collate.put_row(slot_map, views, sample, rows):
                rows += 1
                continue
            fallback = [_collate.read_row(slot_map, buf, r) for r in range(rows)]
            return [*fallback, sample, *samples]
        del views
        if rows == 0:
            return []
        if slot is not None:
            result.rows = rows
        else:
            result.data = _collate.read_batch(slot_map, buf, rows)
        return None

    def _one(self, index: Any, result: Result) -> Any:
        try:
            return self._dataset[index]
        except Exception as exc:
            if not self._spec.skip_errors:
                raise SampleError(index, exc) from exc
            result.skipped.append((index, f"{type(exc).__name__}: {exc}"))
            return _SKIPPED


class IterableStream:
    """An iterable dataset's stream in one worker, for one epoch at a time."""

    def __init__(self, spec: FetchSpec, dataset: Any, worker_id: int) -> None:
        self._spec = spec
        self._dataset = dataset
        self._worker_id = worker_id
        self._iter: Any = None
        self._ended = False
        self.consumed = 0

    def open(self, start: WorkerStart) -> None:
        """Open the stream for an epoch and skip what a resumed run drew."""
        self.consumed = 0
        self._ended = start.ended
        self._iter = iter(self._dataset) if self._spec.iterable and not start.ended else None
        for _ in range(start.skip_samples):
            try:
                next(self._iter)
            except StopIteration:
                self._ended = True
                break
            except Exception:
                pass  # it was skipped (or raised) in the run being resumed too
            self.consumed += 1

    def read(self, task: Task, result: Result) -> list[Any] | None:
        """Up to a batch of samples from the stream; None once it has ended."""
        wanted = len(task.index) if self._spec.auto_collation else 1
        out: list[Any] = []
        while len(out) < wanted and not self._ended:
            try:
                sample = next(self._iter)
            except StopIteration:
                self._ended = True
                break
            except Exception as exc:
                where = f"sample {self.consumed} of worker {self._worker_id}"
                self.consumed += 1
                if not self._spec.skip_errors:
                    raise SampleError(where, exc) from exc
                result.skipped.append((where, f"{type(exc).__name__}: {exc}"))
                continue
            self.consumed += 1
            out.append(sample)
        if not out or (self._spec.drop_last and len(out) < wanted):
            result.ended = True
            return None
        return out


_SKIPPED = object()


def _attach(ref: Any) -> np.ndarray:
    from ..pipeline._shm import attach

    return attach(ref).reshape(-1).view(np.uint8)
