"""What a loader worker does with one task: read samples, collate, report.

One :class:`Fetcher` lives in each worker (thread or process), made by the pool's
``init_fn`` inside it.  Tasks reach a worker in the order the loader assigns them, so
its random state after each task is a function of the tasks before it; each result
carries that state, which is what makes a mid-epoch resume exact.
"""

from __future__ import annotations

import copy
import types
from typing import Any

import numpy as np

from ..pipeline.failure import Failure
from . import _collate, _sampling
from ._reading import SampleError, SampleReader
from ._settings import LoaderWorkerKind
from ._tasks import FetchSpec, Result, Task, WorkerStart
from ._worker_ctx import enter_worker, outside_worker, restore_rng, snapshot_rng

__all__ = ["FetchSpec", "Fetcher", "Result", "Task", "WorkerStart"]


class Fetcher:
    """The worker-side state: seeds, worker info, this worker's copy of the dataset."""

    def __init__(self, spec: FetchSpec, worker_id: int, *, kind: LoaderWorkerKind) -> None:
        self.spec = spec
        self.worker_id = worker_id
        self.kind = kind
        """Where it runs; ``"main"`` (num_workers=0) means no seeding and no worker info."""
        self.dataset = _worker_copy(spec.dataset) if kind == "thread" else spec.dataset
        """This worker's dataset object (``get_worker_info().dataset``)."""
        self._datapipe = _sampling.is_datapipe(self.dataset)
        if self._datapipe and kind != "main":
            _sampling.shard(self.dataset, spec.num_workers, worker_id)
        self.info: Any = None
        self._reader = SampleReader(spec, self.dataset, worker_id)
        self._seeded_base: int | None = None

    def start(self, start: WorkerStart) -> None:
        """Seed (once per base seed), run ``worker_init_fn``, open the dataset iterator."""
        spec = self.spec
        if self.kind != "main" and self._seeded_base != start.base_seed:
            self.info = enter_worker(
                self.dataset,
                worker_id=self.worker_id,
                num_workers=spec.num_workers,
                base_seed=start.base_seed,
                in_process=self.kind == "process",
            )
            self._seeded_base = start.base_seed
            if self._datapipe and start.shared_seed is not None:
                _sampling.reseed(self.dataset, start.shared_seed)
            if spec.worker_init_fn is not None:
                self._init_fn()(self.worker_id)
        elif self._datapipe and start.shared_seed is not None:
            _sampling.reseed(self.dataset, start.shared_seed)
        if start.rng is not None and self.info is not None:
            restore_rng(self.info, start.rng)
        self._reader.open(start)

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
            samples = self._reader.read(task, result)
            if samples == [] and not result.ended:
                result.empty = True  # every sample of the batch was skipped
            elif samples is not None:
                try:
                    self._collate(task, samples, result)
                except Exception as exc:
                    raise SampleError(task.index, exc) from exc
        except SampleError as err:
            # From a process, only what survives pickling can travel.
            result.failure = Failure.capture(err.exc, pickled=self.kind == "process")
            result.failed_index = err.index
            result.data = None
        result.consumed = self._reader.consumed
        result.rng = None if self.info is None else snapshot_rng(self.info)
        return result

    def _collate(self, task: Task, samples: list[Any], result: Result) -> None:
        spec = self.spec
        if not spec.auto_collation:
            convert = spec.collate_fn or _collate.default_convert()
            result.data = convert(samples[0])
            return
        if spec.collate_fn is not None:
            result.data = spec.collate_fn(samples)
            return
        reader = self._reader
        if not reader.planned and isinstance(task.index, list):
            # A first batch the reader could not write as it read (``__getitems__``)
            # decides here whether samples are fixed-size; the loader makes its slot
            # pool from the layout this sends back.
            layout = result.layout = _collate.plan_slot_map(samples[0], len(task.index))
            reader.slot_map, reader.planned = layout, True
            if layout is not None and len(samples) <= layout.batch_size:
                # Fresh memory in the same layout, without torch.stack (whose thread
                # pool stalls when the cores are busy decoding).
                buf = np.empty(layout.nbytes, np.uint8)
                if _collate.write_samples(layout, buf, samples):
                    result.data = _collate.read_batch(layout, buf, len(samples))
                    return
        if self.kind == "thread":
            # torch's default_collate puts a batch made in a worker into shared memory
            # (one file descriptor per tensor), for the pipe to a worker process; a
            # thread's batch needs none of that.
            with outside_worker():
                result.data = _collate.default_collate()(samples)
        else:
            result.data = _collate.default_collate()(samples)


def _worker_copy(dataset: Any) -> Any:
    """A shallow copy for one thread worker, as each torch worker process has its own
    (a deep copy of a DataPipe graph: see :mod:`._sampling`).

    ``worker_init_fn`` commonly assigns to ``get_worker_info().dataset`` (a shard's start
    and end); on a shared object, threads would overwrite each other's.  A shallow copy
    shares the data itself (arrays, file handles), so it costs no memory.
    """
    try:
        if _sampling.is_datapipe(dataset):
            return _sampling.thread_copy(dataset)
        return copy.copy(dataset)
    except Exception:
        return dataset  # not copyable: every thread uses the one object
