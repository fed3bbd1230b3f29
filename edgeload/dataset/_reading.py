"""How a worker reads one task's samples: by index, or from its stream of an iterable.

With a slot map and a map-style dataset the samples go straight into the task's slot
(or fresh memory of the same layout) as they are read; otherwise they come back as a
list for the collate step.  A sample whose loading raises is skipped and reported
(``on_error="skip"``) or ends the task as a :class:`SampleError`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _collate
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
        self._worker_id = worker_id
        self._iter: Any = None
        self._ended = False
        self.consumed = 0
        """Iterable datasets: samples drawn from the stream this epoch."""
        self.slot_map: _collate.SlotMap | None = None
        """The layout of fixed-size batches, once the first batch has shown it."""

    def open(self, start: WorkerStart) -> None:
        """Open the dataset's stream for an epoch and skip what a resumed run drew."""
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
        """The task's samples, or None when they are already in ``result`` (written
        into the slot, or the stream ended)."""
        slot_map = self._streaming_map(task)
        if slot_map is not None:
            return self._read_streaming(task, result, slot_map)
        spec = self._spec
        if spec.iterable:
            return self._read_iterable(task, result)
        if not spec.auto_collation:
            sample = self._one(task.index, result)
            return [] if sample is _SKIPPED else [sample]
        getitems = getattr(self._dataset, "__getitems__", None)
        if getitems and not spec.skip_errors:
            try:
                return list(getitems(task.index))
            except Exception as exc:
                raise SampleError(task.index, exc) from exc
        out = []
        for index in task.index:
            sample = self._one(index, result)
            if sample is not _SKIPPED:
                out.append(sample)
        return out

    def _streaming_map(self, task: Task) -> _collate.SlotMap | None:
        """The layout to write samples into as they are read, if this task can."""
        spec = self._spec
        slot_map = task.layout or self.slot_map
        if (
            slot_map is None
            or spec.iterable
            or not spec.auto_collation
            or spec.collate_fn is not None
            or (getattr(self._dataset, "__getitems__", None) and not spec.skip_errors)
            or len(task.index) > slot_map.batch_size
        ):
            return None
        return slot_map

    def _read_streaming(
        self, task: Task, result: Result, slot_map: _collate.SlotMap
    ) -> list[Any] | None:
        """Read samples straight into the slot (or fresh memory): no list of samples.

        Returns None when the batch is complete in memory (``result.rows`` for a slot,
        ``result.data`` otherwise), or the samples for ``default_collate`` when one does
        not fit the layout (the rows written so far are rebuilt as they were).
        """
        if task.slot is None:
            buf = np.empty(slot_map.nbytes, np.uint8)
        elif isinstance(task.slot, np.ndarray):
            buf = task.slot
        else:
            buf = _attach(task.slot)
        views = _collate.batch_views(slot_map, buf)
        rows = 0
        fallback: list[Any] | None = None
        for index in task.index:
            sample = self._one(index, result)
            if sample is _SKIPPED:
                continue
            if fallback is None:
                if _collate.put_row(slot_map, views, sample, rows):
                    rows += 1
                    continue
                fallback = [_collate.read_row(slot_map, buf, r) for r in range(rows)]
            fallback.append(sample)
        del views
        if fallback is not None or rows == 0:
            return fallback or []
        if task.slot is not None:
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

    def _read_iterable(self, task: Task, result: Result) -> list[Any] | None:
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
