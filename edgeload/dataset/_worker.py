"""The worker side of the loader: what travels to a worker, who it is, and what it does
with one task.

What travels between the loader and its workers is plain data that pickles, for process
workers: the spec (sent once), each worker's start, the tasks and their results.

One :class:`Fetcher` lives in each worker (thread or process), made by the pool's
``init_fn`` inside it.  Tasks reach a worker in the order the loader assigns them, so
its random state after each task is a function of the tasks before it; each result
carries that state, which is what makes a mid-epoch resume exact.

A worker reads one task's samples by index, or from its stream of an iterable.  With the
default collate and a map-style dataset the samples go straight into the task's slot (or
fresh memory of the same layout) as they are read; a worker's first batch learns that
layout from its first sample.  Otherwise they come back as a list for the collate step.
A sample whose loading raises is skipped and reported (``on_error="skip"``) or ends the
task: a :class:`SampleError` carries it out of the reading, and :meth:`Fetcher.run`
sends it back as the result's :class:`~edgeload.pipeline._failure.Failure`.

Who a loader worker is, and its random state, is the same for threads and processes.
Process workers are seeded exactly as torch seeds its worker processes: with
``seed = base_seed + worker_id``, Python's ``random``, torch's default generator and
``numpy.random`` (from a SeedSequence-style hash of the base seed and worker id) are
reseeded, and torch's ``get_worker_info()`` returns this worker's info.

Thread workers share the process's global generators with the main thread and with each
other, so reseeding them would reseed everyone's.  Instead each thread worker gets its own
generators, seeded the same way, in ``get_worker_info().rng``: ``random_generator``
(``random.Random``), ``torch_generator`` and ``numpy_generator`` (a legacy
``RandomState``, the kind ``numpy.random.seed`` seeds).  A dataset that draws from these
gets the same numbers in a thread worker as from the globals in a process worker.
``torch.utils.data.get_worker_info()`` is made to return the thread's info (see
:func:`install_torch_hook`).  Only recent torch has ``worker._RNG`` and the ``rng`` and
``worker_method`` fields, none of the JetPack builds; on older torch the same
generators travel in :class:`ThreadRNG`, and its ``WorkerInfo`` (which takes any keyword)
carries them.

Seeding calls made in a thread worker reach that worker's own generators.  torch seeds
each worker process's global generators with ``base_seed + id``, and a
``worker_init_fn`` often reseeds them.  Thread workers share one process, so the same
calls would read or reseed the main thread's generators.  Once a loader runs thread
workers, these calls are redirected when made from one of its threads: to the worker's
``get_worker_info().rng`` generators, seeded as torch seeds a worker process:

- ``torch.initial_seed / manual_seed / seed / get_rng_state / set_rng_state``: the code
  of torch's functions is replaced in place (so names imported earlier see it too);
- ``random.seed`` and ``numpy.random.seed``: the module attributes are replaced.

Everywhere else (the main thread, process workers, other threads) they behave as
before.  Draws that use the global generators (``torch.rand()`` without
``generator=``) still share them; use ``get_worker_info().rng`` (or, on a torch that has
it, ``torch.random.thread_safe_generator()``) for per-worker draws.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import itertools
import logging
import random
import threading
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._deps import require_torch
from ..errors import ClosedError
from ..pipeline._failure import Failure
from ..pipeline._shm import install as reserve_torch_shm
from . import _collate, _sampling
from ._settings import LoaderWorkerKind

# What travels between the loader and its workers --------------------------------------


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
    """Where to write the batch: a SlotClaim (thread workers: the slot is taken when the
    worker starts writing), an ndarray (``num_workers=0``) or a SlotRef (processes)."""
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
    failure: Failure | None = None
    """What loading raised, when errors are not skipped: the task yields nothing."""
    failed_index: Any = None
    """The sample whose loading raised (the task's index for a collate failure)."""
    empty: bool = False
    """Every sample of the batch was skipped: nothing to yield."""


class SlotClaim:
    """A thread worker's slot, taken when the worker starts writing its task.

    Taken when the task was queued instead, a task waiting behind another in its
    worker's inbox held a slot it did not write yet; refilled on delivery, a plain loop
    then touched one slot per task in flight, plus the batch just delivered and the one
    it still held.  Taken at the start, tasks waiting hold none.
    """

    __slots__ = ("_cancelled", "_lock", "_pool", "_slot")

    def __init__(self, pool: Any) -> None:
        self._pool = pool
        self._lock = threading.Lock()
        self._slot: Any = None
        self._cancelled = False

    def take(self) -> Any:
        """In the worker: a free slot's array to write the batch into, or None (no free
        slot, or the task was settled): then the batch goes to fresh memory."""
        with self._lock:
            if self._cancelled:
                return None
            if self._slot is None:
                try:
                    self._slot = self._pool.acquire(timeout_s=0)
                except (TimeoutError, ClosedError):
                    return None
            return self._slot.array

    def settle(self) -> Any:
        """In the loader, once the task's result is back or its workers are stopped: the
        slot taken (or None); later :meth:`take` calls get None."""
        with self._lock:
            self._cancelled = True
            slot, self._slot = self._slot, None
            return slot


# What a worker does with one task -----------------------------------------------------


def _init_worker(spec: FetchSpec, info: Any) -> None:
    info.state["fetcher"] = Fetcher(spec, info.id, kind=info.kind)


def _run(message: tuple[WorkerStart | None, Task]) -> Result:
    from ..pipeline.workers import current_worker

    info = current_worker()
    if info is None:  # pragma: no cover - the pool always sets it
        raise RuntimeError("edgeload loader task run outside a worker")
    fetcher: Fetcher = info.state["fetcher"]
    start, task = message
    if start is not None:
        fetcher.start(start)
    return fetcher.run(task)


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


# How a worker reads one task's samples ------------------------------------------------


class SampleError(Exception):
    """Loading sample ``index`` raised ``exc``: the task fails with it.

    Only a signal inside the worker; it travels as ``Result.failure``.
    """

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


# Who a worker is, and its random state ------------------------------------------------

_local = threading.local()
_hook_lock = threading.Lock()
# The code torch's get_worker_info() runs once hooked: the thread's info, else torch's own.
_HOOK_SOURCE = """
def get_worker_info():
    info = _edgeload_thread_worker_info()
    return _worker_info if info is None else info
"""


def get_worker_info() -> Any:
    """This worker's info (``id``, ``num_workers``, ``seed``, ``dataset``, ``rng``), or None.

    Works in edgeload thread and process workers, and in torch's worker processes; in the
    main thread it returns None.
    """
    info = getattr(_local, "info", None)
    if info is not None:
        return info
    from torch.utils.data._utils import worker  # torch is loaded in any worker

    return worker._worker_info


def _thread_info() -> Any:
    return getattr(_local, "info", None)


def install_torch_hook() -> None:
    """Make ``torch.utils.data.get_worker_info()`` see edgeload thread workers.

    torch keeps the info in a module global, one per process.  The hook replaces the code
    of torch's function in place (so names imported with ``from torch.utils.data import
    get_worker_info`` before the hook see it too): it returns the calling thread's info
    when the caller is an edgeload thread worker, and torch's global otherwise.
    """
    require_torch()
    from torch.utils.data._utils import worker

    with _hook_lock:
        fn = worker.get_worker_info
        if worker.__dict__.get("_edgeload_thread_worker_info") is _thread_info:
            return
        scope: dict[str, Any] = {}
        exec(compile(_HOOK_SOURCE, "<edgeload worker-info hook>", "exec"), scope)
        worker.__dict__["_edgeload_thread_worker_info"] = _thread_info
        try:
            fn.__code__ = scope["get_worker_info"].__code__
        except (AttributeError, TypeError, ValueError) as exc:
            # A torch whose get_worker_info is not a plain module function (a closure,
            # a builtin): thread workers then answer through edgeload.get_worker_info().
            del worker.__dict__["_edgeload_thread_worker_info"]
            logging.getLogger("edgeload").warning(
                "cannot make torch.utils.data.get_worker_info() see thread workers (%s); "
                "use edgeload.get_worker_info() in datasets run by thread workers",
                exc,
            )


def numpy_seed(base_seed: int, worker_id: int) -> list[int]:
    """The numpy seed torch gives worker ``worker_id`` for ``base_seed``."""
    require_torch()
    from torch.utils.data._utils.worker import _generate_state

    return list(_generate_state(base_seed, worker_id))  # type: ignore[no-untyped-call]


def enter_worker(
    dataset: Any, *, worker_id: int, num_workers: int, base_seed: int, in_process: bool
) -> Any:
    """Seed this worker and publish its info; returns the info.

    Args:
        dataset: the dataset object this worker reads (``info.dataset``).
        worker_id: 0 .. num_workers - 1.
        num_workers: how many workers the loader runs.
        base_seed: the loader's base seed for this set of workers.
        in_process: a dedicated process (seed the globals) rather than a thread.
    """
    torch = require_torch()
    from torch.utils.data._utils import worker

    seed = base_seed + worker_id
    np_seed = numpy_seed(base_seed, worker_id)
    if in_process:
        # default_collate stacks a batch made here straight into torch shared memory
        reserve_torch_shm()
        torch.set_num_threads(1)
        random.seed(seed)
        torch.manual_seed(seed)
        np.random.seed(np_seed)
        info = worker.WorkerInfo(id=worker_id, num_workers=num_workers, seed=seed, dataset=dataset)
        worker._worker_info = info
        return info
    gen = torch.Generator()
    gen.manual_seed(seed)
    # torch's own container where it has one (recent torch only), else ours, same fields
    rng_type: Any = getattr(worker, "_RNG", ThreadRNG)
    rng: Any = rng_type(
        random_generator=random.Random(seed),
        torch_generator=gen,
        numpy_generator=np.random.RandomState(np_seed),
    )
    fields = {"id": worker_id, "num_workers": num_workers, "seed": seed, "dataset": dataset}
    make_info: Any = worker.WorkerInfo
    try:
        # older torch takes any keyword; one that takes only its own fields gets ours
        thread_info = make_info(**fields, rng=rng, worker_method="thread")
    except TypeError:
        thread_info = ThreadWorkerInfo(**fields, rng=rng)
    _local.info = thread_info
    return thread_info


def thread_worker_fallbacks() -> list[tuple[str, str]]:
    """What this torch lacks for thread workers, and what edgeload does instead."""
    require_torch()
    from torch.utils.data._utils import worker

    found = []
    if not hasattr(worker, "_RNG"):
        found.append(
            (
                "torch has no per-thread worker generators (worker._RNG, only in recent torch)",
                "thread workers get edgeload's ThreadRNG in get_worker_info().rng",
            )
        )
    return found


@dataclass(frozen=True)
class ThreadRNG:
    """A thread worker's own generators, for a torch without ``worker._RNG``."""

    random_generator: random.Random
    torch_generator: Any
    numpy_generator: Any


@dataclass(frozen=True)
class ThreadWorkerInfo:
    """A thread worker's info, for a torch whose ``WorkerInfo`` refuses ``rng``."""

    id: int
    num_workers: int
    seed: int
    dataset: Any
    rng: Any
    worker_method: str = "thread"


@contextlib.contextmanager
def outside_worker() -> Iterator[None]:
    """Hide this thread worker's info from torch for a moment (see ``Fetcher._collate``)."""
    info = getattr(_local, "info", None)
    _local.info = None
    try:
        yield
    finally:
        _local.info = info


def leave_worker() -> None:
    """Forget this thread's worker info (thread workers, when they stop)."""
    _local.info = None


def _generators(info: Any) -> tuple[Any, Any, Any]:
    """The (python, numpy, torch) generators this worker's dataset draws from."""
    rng = getattr(info, "rng", None)
    if rng is not None:
        return rng.random_generator, rng.numpy_generator, rng.torch_generator
    torch = require_torch()
    return random, np.random, torch.random


def snapshot_rng(info: Any) -> list[Any]:
    """The worker's random state now, as plain JSON-ready data."""
    py, npr, tg = _generators(info)
    version, internal, gauss = py.getstate()
    name, keys, pos, has_gauss, cached = npr.get_state()
    torch_state = tg.get_rng_state() if hasattr(tg, "get_rng_state") else tg.get_state()
    return [
        [version, list(internal), gauss],
        [name, keys.tolist(), int(pos), int(has_gauss), float(cached)],
        base64.b64encode(torch_state.numpy().tobytes()).decode("ascii"),
    ]


def restore_rng(info: Any, snapshot: list[Any]) -> None:
    """Put back a state taken by :func:`snapshot_rng`."""
    torch = require_torch()
    py, npr, tg = _generators(info)
    (version, internal, gauss), nps, torch_text = snapshot
    py.setstate((version, tuple(internal), gauss))
    npr.set_state((nps[0], np.asarray(nps[1], dtype=np.uint32), nps[2], nps[3], nps[4]))
    raw = torch.frombuffer(bytearray(base64.b64decode(torch_text)), dtype=torch.uint8).clone()
    if hasattr(tg, "set_rng_state"):
        tg.set_rng_state(raw)
    else:
        tg.set_state(raw)


def check_rng(snapshot: Any) -> None:
    """Raise (TypeError, ValueError...) unless :func:`restore_rng` can put ``snapshot``
    back: it is restored into fresh generators, so a loaded state fails when loaded,
    not in a worker at the next ``iter()``."""
    torch = require_torch()
    info = types.SimpleNamespace(
        rng=types.SimpleNamespace(
            random_generator=random.Random(),
            numpy_generator=np.random.RandomState(),
            torch_generator=torch.Generator(),
        )
    )
    restore_rng(info, snapshot)


# Seeding calls in a thread worker reach its own generators ----------------------------

_lock = threading.Lock()
_installed = False
_TORCH_NAMES = ("initial_seed", "manual_seed", "seed", "get_rng_state", "set_rng_state")
_originals: dict[str, Callable[..., Any]] = {}
_DISPATCH_SOURCE = """
def {name}(*args, **kwargs):
    return _edgeload_seed_dispatch({name!r}, args, kwargs)
"""


def _thread_rng() -> Any:
    return getattr(_thread_info(), "rng", None)


def _torch_call(name: str, gen: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if name == "initial_seed":
        return gen.initial_seed()
    if name == "manual_seed":
        return gen.manual_seed(int(args[0] if args else kwargs["seed"]))
    if name == "seed":
        return gen.seed()
    if name == "get_rng_state":
        return gen.get_state()
    return gen.set_state(args[0] if args else kwargs["new_state"])


def _dispatch(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    rng = _thread_rng()
    if rng is not None:
        return _torch_call(name, rng.torch_generator, args, kwargs)
    return _originals[name](*args, **kwargs)


def _random_seed(a: Any = None, version: int = 2) -> None:
    rng = _thread_rng()
    if rng is not None:
        rng.random_generator.seed(a, version)
    else:
        _originals["random.seed"](a, version)


def _numpy_seed(seed: Any = None) -> None:
    rng = _thread_rng()
    if rng is not None and rng.numpy_generator is not None:
        rng.numpy_generator.seed(seed)
    else:
        _originals["numpy.random.seed"](seed)


def _hook_torch(torch_random: Any) -> None:
    for name in _TORCH_NAMES:
        fn = getattr(torch_random, name, None)
        if not isinstance(fn, types.FunctionType) or fn.__closure__:
            logging.getLogger("edgeload").warning(
                "cannot route torch.%s to thread workers' generators; in thread workers "
                "it acts on the main process's generator",
                name,
            )
            continue
        original = types.FunctionType(
            fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__
        )
        original.__kwdefaults__ = fn.__kwdefaults__
        scope: dict[str, Any] = {}
        code = compile(_DISPATCH_SOURCE.format(name=name), "<edgeload seed hook>", "exec")
        exec(code, scope)
        _originals[name] = original
        fn.__globals__["_edgeload_seed_dispatch"] = _dispatch
        fn.__code__ = scope[name].__code__
        fn.__defaults__ = None
        fn.__kwdefaults__ = None


def install_seed_hooks() -> None:
    """Route the seeding calls of thread workers to their own generators (once)."""
    global _installed
    with _lock:
        if _installed:
            return
        import torch.random

        _hook_torch(torch.random)
        _originals["random.seed"] = random.seed
        random.seed = _random_seed  # type: ignore[assignment]
        _originals["numpy.random.seed"] = np.random.seed
        np.random.seed = _numpy_seed
        _installed = True
