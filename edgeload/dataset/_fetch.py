"""What a loader worker does with one task: read samples, collate, report.

One :class:`Fetcher` lives in each worker (thread or process), made by :func:`open_fetcher`
inside it.  Tasks reach a worker in the order the loader assigns them, so its random
state after each task is a function of the tasks before it; each result carries that
state, which is what makes a mid-epoch resume exact.
"""

from __future__ import annotations

import copy
import pickle
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._compat import format_exception
from . import _collate, _datapipes
from ._worker_ctx import enter_worker, outside_worker, restore_rng, snapshot_rng


@dataclass(frozen=True)
class FetchSpec:
    """Everything a worker needs, sent once (pickled, for process workers)."""

    dataset: Any
    iterable: bool
    auto_collation: bool
    collate_fn: Callable[[Any], Any] | None
    """None: the default collate, which may write into slots."""
    drop_last: bool
    worker_init_fn: Callable[[int], None] | None
    skip_errors: bool
    num_workers: int


@dataclass(frozen=True)
class WorkerStart:
    """How one worker begins (or begins again, for a new epoch or a resume)."""

    base_seed: int
    rng: list[Any] | None = None
    """A snapshot to restore after seeding (map-style resume)."""
    skip_samples: int = 0
    """Iterable datasets: samples to draw and discard first (resume)."""
    ended: bool = False
    """Iterable datasets: this worker's stream already ended (resume)."""
    shared_seed: int | None = None
    """DataPipes: the epoch's seed for the pipe's shuffles, the same in every worker."""


@dataclass(frozen=True)
class Task:
    """Read one batch (or one sample, without automatic batching)."""

    position: int
    index: Any
    """A list of indices, one index, or placeholders for an iterable dataset."""
    slot: Any = None
    """Where to write the batch: an ndarray (threads) or a SlotRef (processes)."""
    layout: _collate.SlotMap | None = None


@dataclass
class Result:
    """What a worker sends back for one task."""

    position: int
    worker_id: int
    data: Any = None
    """The collated batch, or None when written into the task's slot."""
    rows: int = 0
    """Samples written into the slot."""
    ended: bool = False
    """An iterable dataset ran out: no data for this task."""
    skipped: list[tuple[Any, str]] = field(default_factory=list)
    """(index, error) of each sample skipped because its loading raised."""
    layout: _collate.SlotMap | None = None
    """A slot layout suggested by this batch's samples (first batches only)."""
    rng: list[Any] | None = None
    consumed: int = 0
    """Iterable datasets: samples this worker has drawn so far."""
    error: tuple[Any, str, str] | None = None
    """(index, message, traceback) when loading raised and errors are not skipped."""
    empty: bool = False
    """Every sample of the batch was skipped: nothing to yield."""
    exc: BaseException | None = None
    """The exception itself, when it can travel (it pickles, or this is a thread)."""
    exc_type: type[BaseException] | None = None
    """Its type, when that can travel: the consumer raises one of this type."""


class _SampleError(Exception):
    def __init__(self, index: Any, exc: BaseException) -> None:
        super().__init__(index)
        self.index = index
        self.exc = exc


class Fetcher:
    """The worker-side state: seeds, worker info, the dataset iterator."""

    def __init__(self, spec: FetchSpec, worker_id: int, *, mode: str) -> None:
        self.spec = spec
        self.worker_id = worker_id
        self.mode = mode
        """``"main"`` (num_workers=0: no seeding, no worker info), "thread" or "process"."""
        self.dataset = _worker_copy(spec.dataset) if mode == "thread" else spec.dataset
        """This worker's dataset object (``get_worker_info().dataset``)."""
        self._datapipe = _datapipes.is_datapipe(self.dataset)
        if self._datapipe and mode != "main":
            _datapipes.shard(self.dataset, spec.num_workers, worker_id)
        self.info: Any = None
        self._iter: Any = None
        self._ended = False
        self._consumed = 0
        self._seeded_base: int | None = None
        self._suggest_layout = True
        self._layout: _collate.SlotMap | None = None

    def start(self, start: WorkerStart) -> None:
        """Seed (once per base seed), run ``worker_init_fn``, open the dataset iterator."""
        spec = self.spec
        if self.mode != "main" and self._seeded_base != start.base_seed:
            self.info = enter_worker(
                self.dataset,
                worker_id=self.worker_id,
                num_workers=spec.num_workers,
                base_seed=start.base_seed,
                in_process=self.mode == "process",
            )
            self._seeded_base = start.base_seed
            if self._datapipe and start.shared_seed is not None:
                _datapipes.reseed(self.dataset, start.shared_seed)
            if spec.worker_init_fn is not None:
                self._init_fn()(self.worker_id)
        elif self._datapipe and start.shared_seed is not None:
            _datapipes.reseed(self.dataset, start.shared_seed)
        if start.rng is not None and self.info is not None:
            restore_rng(self.info, start.rng)
        self._consumed = 0
        self._ended = start.ended
        self._iter = iter(self.dataset) if spec.iterable and not start.ended else None
        for _ in range(start.skip_samples):
            try:
                next(self._iter)
            except StopIteration:
                self._ended = True
                break
            except Exception:
                pass  # it was skipped (or raised) in the run being resumed too
            self._consumed += 1

    def _init_fn(self) -> Any:
        """``worker_init_fn``, bound to this worker's copy when it is a method of the
        dataset (``worker_init_fn=dataset.setup`` must set up the copy the worker reads)."""
        fn = self.spec.worker_init_fn
        if isinstance(fn, types.MethodType) and fn.__self__ is self.spec.dataset:
            return types.MethodType(fn.__func__, self.dataset)
        return fn

    def run(self, task: Task) -> Result:
        """Produce the result of ``task``; loading errors travel inside the result."""
        result = Result(task.position, self.worker_id)
        try:
            layout = self._streaming_layout(task)
            if layout is not None:
                samples = self._read_streaming(task, result, layout)
            else:
                samples = self._read(task, result)
            if samples == [] and not result.ended:
                result.empty = True  # every sample of the batch was skipped
            elif samples is not None:
                try:
                    self._collate(task, samples, result)
                except Exception as exc:
                    raise _SampleError(task.index, exc) from exc
        except _SampleError as err:
            text = "".join(format_exception(err.exc))
            result.error = (err.index, f"{type(err.exc).__name__}: {err.exc}", text)
            result.data = None
            result.exc = err.exc if self.mode != "process" or _pickles(err.exc) else None
            kind = type(err.exc)
            result.exc_type = kind if self.mode != "process" or _pickles(kind) else None
        result.consumed = self._consumed
        result.rng = None if self.info is None else snapshot_rng(self.info)
        return result

    def _streaming_layout(self, task: Task) -> _collate.SlotMap | None:
        """The layout to write samples into as they are read, if this task can."""
        spec = self.spec
        layout = task.layout or self._layout
        if (
            layout is None
            or spec.iterable
            or not spec.auto_collation
            or spec.collate_fn is not None
            or (getattr(self.dataset, "__getitems__", None) and not spec.skip_errors)
            or len(task.index) > layout.batch_size
        ):
            return None
        return layout

    def _read_streaming(
        self, task: Task, result: Result, layout: _collate.SlotMap
    ) -> list[Any] | None:
        """Read samples straight into the slot (or fresh memory): no list of samples.

        Returns None when the batch is complete in memory (``result.rows`` for a slot,
        ``result.data`` otherwise), or the samples for ``default_collate`` when one does
        not fit the layout (the rows written so far are rebuilt as they were).
        """
        if task.slot is None:
            buf = np.empty(layout.nbytes, np.uint8)
        elif isinstance(task.slot, np.ndarray):
            buf = task.slot
        else:
            buf = _attach(task.slot)
        views = _collate.batch_views(layout, buf)
        rows = 0
        fallback: list[Any] | None = None
        for index in task.index:
            sample = self._one(index, result)
            if sample is _SKIPPED:
                continue
            if fallback is None:
                if _collate.put_row(layout, views, sample, rows):
                    rows += 1
                    continue
                fallback = [_collate.read_row(layout, buf, r) for r in range(rows)]
            fallback.append(sample)
        del views
        if fallback is not None or rows == 0:
            return fallback or []
        if task.slot is not None:
            result.rows = rows
        else:
            result.data = _collate.read_batch(layout, buf, rows)
        return None

    def _read(self, task: Task, result: Result) -> list[Any] | None:
        spec = self.spec
        if spec.iterable:
            return self._read_iterable(task, result)
        if not spec.auto_collation:
            sample = self._one(task.index, result)
            return [] if sample is _SKIPPED else [sample]
        getitems = getattr(self.dataset, "__getitems__", None)
        if getitems and not spec.skip_errors:
            try:
                return list(getitems(task.index))
            except Exception as exc:
                raise _SampleError(task.index, exc) from exc
        out = []
        for index in task.index:
            sample = self._one(index, result)
            if sample is not _SKIPPED:
                out.append(sample)
        return out

    def _one(self, index: Any, result: Result) -> Any:
        try:
            return self.dataset[index]
        except Exception as exc:
            if not self.spec.skip_errors:
                raise _SampleError(index, exc) from exc
            result.skipped.append((index, f"{type(exc).__name__}: {exc}"))
            return _SKIPPED

    def _read_iterable(self, task: Task, result: Result) -> list[Any] | None:
        wanted = len(task.index) if self.spec.auto_collation else 1
        out: list[Any] = []
        while len(out) < wanted and not self._ended:
            try:
                sample = next(self._iter)
            except StopIteration:
                self._ended = True
                break
            except Exception as exc:
                where = f"sample {self._consumed} of worker {self.worker_id}"
                self._consumed += 1
                if not self.spec.skip_errors:
                    raise _SampleError(where, exc) from exc
                result.skipped.append((where, f"{type(exc).__name__}: {exc}"))
                continue
            self._consumed += 1
            out.append(sample)
        if not out or (self.spec.drop_last and len(out) < wanted):
            result.ended = True
            return None
        return out

    def _collate(self, task: Task, samples: list[Any], result: Result) -> None:
        spec = self.spec
        if not spec.auto_collation:
            convert = spec.collate_fn or _collate.default_convert()
            result.data = convert(samples[0])
            return
        if spec.collate_fn is not None:
            result.data = spec.collate_fn(samples)
            return
        if self._layout is None and self._suggest_layout and isinstance(task.index, list):
            # The first batch decides whether samples are fixed-size; the loader makes
            # its slot pool from the layout this sends back.
            layout = result.layout = _collate.plan_slot_map(samples[0], len(task.index))
            self._layout, self._suggest_layout = layout, False
            if layout is not None and len(samples) <= layout.batch_size:
                # Fresh memory in the same layout, without torch.stack (whose thread
                # pool stalls when the cores are busy decoding).
                buf = np.empty(layout.nbytes, np.uint8)
                if _collate.write_samples(layout, buf, samples):
                    result.data = _collate.read_batch(layout, buf, len(samples))
                    return
        if self.mode == "thread":
            # torch's default_collate puts a batch made in a worker into shared memory
            # (one file descriptor per tensor), for the pipe to a worker process; a
            # thread's batch needs none of that.
            with outside_worker():
                result.data = _collate.default_collate()(samples)
        else:
            result.data = _collate.default_collate()(samples)


_SKIPPED = object()


def _worker_copy(dataset: Any) -> Any:
    """A shallow copy for one thread worker, as each torch worker process has its own
    (a deep copy of a DataPipe graph: see :mod:`._datapipes`).

    ``worker_init_fn`` commonly assigns to ``get_worker_info().dataset`` (a shard's start
    and end); on a shared object, threads would overwrite each other's.  A shallow copy
    shares the data itself (arrays, file handles), so it costs no memory.
    """
    try:
        if _datapipes.is_datapipe(dataset):
            return _datapipes.thread_copy(dataset)
        return copy.copy(dataset)
    except Exception:
        return dataset  # not copyable: every thread uses the one object


def _pickles(obj: Any) -> bool:
    try:
        pickle.loads(pickle.dumps(obj))
    except Exception:
        return False
    return True


def _attach(ref: Any) -> np.ndarray:
    from ..pipeline._shm import attach

    return attach(ref).reshape(-1).view(np.uint8)
