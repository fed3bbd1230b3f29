"""One pass over a DataLoader: torch's iterator, the tasks in flight, where they run, and
the slots their batches go into.

The iterator turns each task's result into a batch; the tasks go out and come back in
order through :class:`TasksInFlight`.  Each worker handles its tasks in order, so what
it produces, and its random state, depend only on the tasks before (see :mod:`._state`).

Task ``p`` of a map-style epoch goes to worker ``p % num_workers``, the assignment torch
uses; an iterable dataset's tasks go round-robin over the workers whose stream has not
ended (the epoch's :class:`~._state.EpochProgress` decides). Results come back in any
order and are given out in task order, or as they arrive with ``in_order=False``.

The tasks run in the calling thread (:class:`InlineExecutor`) or in a
:class:`~edgeload.pipeline.workers.WorkerPool` (:class:`PoolExecutor`); both executors
take the same calls.  A worker's :class:`~edgeload.dataset._worker.WorkerStart` (seed,
resume point) travels with the first task sent to it after ``start_worker``, so a
worker that gets no task in an epoch costs nothing.

The loader's batch slots are made once the first batch shows the samples' layout.
Slots are used only with the default collate and fixed-size samples.  The first
batches are collated by ``default_collate``; the worker that made the first one also
sends a :class:`~edgeload.dataset._collate.SlotMap`, and from then on each task is given
a slot (when one is free) to write its samples into: with the task for a process worker,
when it starts writing for a thread worker (:class:`~edgeload.dataset._worker.SlotClaim`).
A slot the user still holds a batch of is never handed out again (the pool's lease
rule); if none is free the task runs without one, so a user who keeps every batch slows
nothing down and loses nothing.

With ``pin_memory`` a batch is copied into page-locked memory.  With ``engine=``
(``edgeload.cuda.engine``) the GPU calls go to that engine, so a ``HostEngine`` runs
the ``pin_memory`` and GPU-mode paths on a machine without CUDA.
"""

from __future__ import annotations

import collections
import collections.abc
import contextlib
import errno
import functools
import logging
import os
import re
import signal
import threading
import warnings
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Iterator

from .._deps import require_torch
from ..errors import (
    EdgeloadError,
    PlatformError,
    WorkerDied,
    WorkerError,
    WorkerTimeout,
    worker_exception,
)
from ..pipeline._failure import user_error
from ..pipeline._lifecycle import release_frames
from ..vocabulary import WorkerKind
from . import _collate
from ._sampling import EpochOrder
from ._settings import LoaderSettings, LoaderWorkerKind, start_method_of
from ._state import EpochProgress, LoaderState
from ._worker import Fetcher, FetchSpec, Result, SlotClaim, Task, WorkerStart, _init_worker, _run

if TYPE_CHECKING:  # a runtime import would load the CUDA modules early
    from ..cuda.engine import Engine

_log = logging.getLogger("edgeload")


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
        on_end: Callable[[EpochIterator | None, bool], None],
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
        # One next() at a time: callers in several threads each get whole batches, one
        # caller each, and all get StopIteration at the end, as from torch's iterator.
        # A second caller waits for the first's batch, whose own wait is bounded by
        # the loader's timeout.
        self._next_lock = threading.Lock()
        # The loader holds its iterator weakly: dropping an unfinished one ends its pass
        # (the loader stops its workers, the tasks in flight give their slots back).
        # The finalizer holds the parts it stops, never this iterator.
        self._finalizer = weakref.finalize(self, _dropped, on_end, self._tasks)

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
            with self._next_lock:
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
                self._finalizer.detach()
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
            kind, w = self._settings.worker_kind, result.worker_id
            raise user_error(
                result.failure,
                "dataset",
                owner="the main thread" if kind == "main" else f"DataLoader worker {kind} {w}",
                index=result.failed_index,
                worker=f"{kind}-worker-{w}",
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

    def close(self) -> None:
        """Release the slots of tasks still in flight (their results are dropped)."""
        # The loader closes it after stopping the workers itself: the finalizer's call
        # to the loader is not wanted then, only its release of the tasks.
        self._finalizer.detach()
        self._tasks.close()
        self._done = True


def _dropped(on_end: Callable[[EpochIterator | None, bool], None], tasks: TasksInFlight) -> None:
    """An unfinished epoch iterator's finalizer: tell the loader, release the tasks."""
    on_end(None, False)
    tasks.close()


_NOTHING = object()


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


# The tasks in flight ------------------------------------------------------------------


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
        self._slots_held: dict[int, Any] = {}  # position -> slot, SlotClaim or None
        self._exhausted = False
        self._next_pos = progress.yielded
        self._deferred: Exception | None = None  # raised by a refill on delivery
        # Thread workers take their task's slot when they start writing it (SlotClaim)
        self._claims = settings.worker_kind == "thread"
        # Without workers a task runs as it is submitted: a refill would load the next
        # batch before this one is returned
        self._refill_on_delivery = settings.num_workers > 0

    def next_result(self) -> tuple[Result, Any] | None:
        """The next result and its task's slot; None once every task's result was taken.

        With workers, the place the result frees goes to one at once, as torch refills
        on delivery: waiting for the caller's next call would leave the worker that
        made this batch idle while the caller uses it.  What that refill raises (the
        sampler's error, a dead worker) comes at the next call, so this batch is not
        lost to it.  Without workers (``num_workers=0``) each batch is loaded when it
        is asked for, as torch does.
        """
        if self._deferred is not None:
            exc, self._deferred = self._deferred, None
            raise exc
        self._fill()
        result = self._take()
        if result is None:
            return None
        slot = self._slots.settle(self._slots_held.pop(result.position))
        if self._refill_on_delivery:
            try:
                self._fill()
            except Exception as exc:  # re-raised as it was, at the next call
                self._deferred = exc
        return result, slot

    def _fill(self) -> None:
        limit = self._settings.max_in_flight(self._slots.layout)
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
            if self._claims:
                held, layout = self._slots.claim(index)
                handle = held
            else:
                held, layout = self._slots.acquire(index)
                handle = self._exec.slot_handle(held)
            self._slots_held[pos] = held
            self._exec.submit(worker, Task(pos, index, handle, layout))

    def _take(self) -> Result | None:
        while True:
            if self._settings.in_order:
                head = min(self._slots_held, default=None)
                if head is not None and head in self._pending:
                    return self._pending.pop(head)
            elif self._pending:
                return self._pending.pop(next(iter(self._pending)))
            if not self._slots_held:
                return None
            result: Result = self._exec.get(timeout_s=self._settings.timeout_s)
            self._pending[result.position] = result

    def close(self) -> None:
        """Release the slots of tasks still in flight (their results are dropped)."""
        for held in self._slots_held.values():
            self._slots.release(self._slots.settle(held))
        self._slots_held.clear()
        self._pending.clear()


# Where the tasks run: the calling thread, or a WorkerPool -----------------------------

# torch's advice when the process runs out of file descriptors (each tensor a worker
# process returns travels as one): the same words, so the same searches find the fix.
_FD_HINT = (
    "Too many open files. Communication with the workers is no longer possible. Please "
    "increase the limit using `ulimit -n` in the shell or change the sharing strategy by "
    "calling `torch.multiprocessing.set_sharing_strategy('file_system')` at the beginning "
    "of your code (or return numpy arrays, or use worker_kind='thread')"
)


class InlineExecutor:
    """``num_workers=0``: each task runs in the calling thread when submitted."""

    def __init__(self, spec: FetchSpec) -> None:
        self._fetcher = Fetcher(spec, 0, kind="main")
        self._start: WorkerStart | None = None
        self._done: collections.deque[Result] = collections.deque()

    def start_worker(self, worker: int, start: WorkerStart) -> None:
        self._start = start

    def slot_handle(self, slot: Any) -> Any:
        return None if slot is None else slot.array

    def submit(self, worker: int, task: Task) -> None:
        if self._start is not None:
            self._fetcher.start(self._start)
            self._start = None
        self._done.append(self._fetcher.run(task))

    def get(self, *, timeout_s: float | None) -> Result:
        return self._done.popleft()

    def close(self) -> None:
        self._done.clear()


class PoolExecutor:
    """``num_workers > 0``: tasks go to a WorkerPool of threads or processes."""

    def __init__(
        self, spec: FetchSpec, *, kind: WorkerKind, num_workers: int, start_method: str | None
    ) -> None:
        from ..pipeline._processes import start_method_for
        from ..pipeline.workers import WorkerPool

        self.kind = kind
        init_fn = functools.partial(_init_worker, spec)
        self.start_method = self.start_method_reason = ""
        if kind == "process":
            self.start_method, self.start_method_reason = start_method_for(
                start_method, (_run, init_fn)
            )
        self._pool = WorkerPool(
            _run,
            kind=kind,
            num_workers=num_workers,
            start_method=self.start_method or None,
            init_fn=init_fn,
            # The loader applies its own timeout; the pool only watches for deaths.
            timeout_s=None,
            name="loader",
        )
        self._starts: dict[int, WorkerStart] = {}
        self._samples: dict[int, Any] = {}  # pool task index -> its dataset indices

    @property
    def pids(self) -> list[int]:
        """Process ids of process workers (empty for threads)."""
        return self._pool.pids

    def start_worker(self, worker: int, start: WorkerStart) -> None:
        self._starts[worker] = start

    @property
    def workers(self) -> list[Any]:
        """The workers as torch's iterator lists them (``_workers``): processes, or
        handles with the same calls for threads."""
        executor = getattr(self._pool, "_executor", None)
        if self.kind == "process":
            return [_ProcessHandle(p) for p in getattr(executor, "procs", [])]
        return [_ThreadHandle(t) for t in getattr(executor, "threads", [])]

    def slot_handle(self, slot: Any) -> Any:
        if slot is None:
            return None
        return slot.ref if self.kind == "process" else slot.array

    def submit(self, worker: int, task: Task) -> None:
        try:
            index = self._pool.submit((self._starts.pop(worker, None), task), worker=worker)
        except WorkerError as exc:  # the worker died between tasks: as get() says it
            raise self._translate(exc) from exc.__cause__
        self._samples[index] = task.index  # named if this task times out

    def get(self, *, timeout_s: float | None) -> Result:
        try:
            done = self._pool.get(timeout_s=timeout_s)
            self._samples.pop(done.index, None)
            result: Result = done.value
        except WorkerTimeout as exc:
            samples = self._samples.get(exc.index) if isinstance(exc.index, int) else None
            raise WorkerTimeout(
                f"DataLoader timed out after {timeout_s} seconds with no batch from its "
                f"{self.kind} workers; a worker is stuck in the dataset (or raise timeout=): "
                f"{exc.worker} on dataset index {samples}. {exc}",
                index=exc.index,
                worker=exc.worker,
            ) from exc
        except WorkerError as exc:
            raise self._translate(exc) from exc.__cause__
        except (OSError, RuntimeError) as exc:
            if getattr(exc, "errno", None) == errno.EMFILE or "ancdata" in str(exc):
                raise RuntimeError(f"{_FD_HINT}: {exc}") from exc
            raise
        return result

    def _translate(self, exc: WorkerError) -> EdgeloadError:
        """A pool error as torch's DataLoader raises it: a worker's own exception (its
        ``worker_init_fn`` failed) as its type, a worker's death as a RuntimeError."""
        if isinstance(exc, WorkerDied) or exc.traceback_text is None:
            pid = (exc.worker or "").replace("pid ", "") or "?"
            code = re.search(r"exit code (-\d+)", str(exc))
            what = f"(pid(s) {pid}) exited unexpectedly"
            if code is not None:  # torch's words for a worker a signal killed
                what = f"(pid {pid}) is killed by signal: {_signal_name(-int(code.group(1)))}."
            return WorkerDied(f"DataLoader worker {what} {exc}", index=exc.index, worker=exc.worker)
        cause = exc.__cause__
        if isinstance(cause, OSError) and cause.errno == errno.EMFILE:
            return worker_exception(
                RuntimeError, f"{_FD_HINT}: {exc}", index=exc.index, worker=exc.worker
            )
        return worker_exception(
            type(cause) if cause is not None else None,
            f"Caught {type(cause).__name__ if cause else 'an error'} in DataLoader worker "
            f"{self.kind}: {exc}",
            exc=cause,
            index=exc.index,
            worker=exc.worker,
            traceback_text=exc.traceback_text,
        )

    def close(self) -> None:
        self._pool.close()


def make_executor(
    spec: FetchSpec, *, kind: LoaderWorkerKind, num_workers: int, context: Any
) -> InlineExecutor | PoolExecutor:
    """The executor for ``num_workers`` workers of ``kind`` (0: the calling thread).

    Args:
        spec: what the workers load.
        kind: ``"thread"`` or ``"process"``.
        num_workers: 0 or more.
        context: torch's ``multiprocessing_context``: None, a start method name, or a
            ``multiprocessing`` context.
    """
    if num_workers == 0 or kind == "main":
        return InlineExecutor(spec)
    return PoolExecutor(
        spec, kind=kind, num_workers=num_workers, start_method=start_method_of(context)
    )


def make_loader_executor(settings: LoaderSettings) -> InlineExecutor | PoolExecutor:
    """The executor for one epoch (or for all, with persistent workers)."""
    spec = FetchSpec(
        dataset=settings.dataset,
        iterable=settings.sampling.iterable,
        auto_collation=settings.sampling.auto_collation,
        collate_fn=settings.collate_fn,
        drop_last=settings.sampling.drop_last,
        worker_init_fn=settings.worker_init_fn,
        skip_errors=settings.skip_errors,
        num_workers=settings.num_workers,
    )
    return make_executor(
        spec,
        kind=settings.worker_kind,
        num_workers=settings.num_workers,
        context=settings.context,
    )


def _signal_name(number: int) -> str:
    try:
        return signal.strsignal(number) or f"signal {number}"
    except ValueError:
        return f"signal {number}"


class _ThreadHandle:
    """A thread worker seen as torch sees a worker process (``pid``, ``exitcode``...)."""

    def __init__(self, thread: Any) -> None:
        self._thread = thread
        self.pid = os.getpid()
        self.name = thread.name

    def is_alive(self) -> bool:
        return bool(self._thread.is_alive())

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    @property
    def exitcode(self) -> int | None:
        return None if self.is_alive() else 0

    def terminate(self) -> None:
        """Threads cannot be killed; the loader stops them when the iterator goes."""


class _ProcessHandle:
    """A worker process that stays answerable after the pool has closed (released) it."""

    def __init__(self, proc: Any) -> None:
        self._proc = proc
        self.pid = proc.pid
        self.name = proc.name

    def is_alive(self) -> bool:
        try:
            return bool(self._proc.is_alive())
        except ValueError:  # closed: the pool joined it first
            return False

    def join(self, timeout: float | None = None) -> None:
        with contextlib.suppress(ValueError):
            self._proc.join(timeout)

    @property
    def exitcode(self) -> int | None:
        try:
            code: int | None = self._proc.exitcode
        except ValueError:
            return 0  # released only after a clean join
        return code

    def terminate(self) -> None:
        with contextlib.suppress(ValueError):
            self._proc.terminate()


# The batch slots ----------------------------------------------------------------------


class LoaderSlots:
    """Owns the :class:`~edgeload.pipeline.slots.SlotPool` of one loader (or none)."""

    def __init__(
        self,
        *,
        enabled: bool,
        in_flight: int,
        budget_bytes: int | None,
        shared: bool,
        mode: str,
        engine: Engine | None = None,
    ) -> None:
        self.enabled = enabled
        self._in_flight = in_flight
        self._budget_bytes = budget_bytes
        self._count = 2
        self._shared = shared
        self._mode = mode
        self._engine = engine
        self._pool: Any = None
        self.layout: _collate.SlotMap | None = None

    def offer_layout(self, layout: _collate.SlotMap) -> None:
        """Create the pool for ``layout`` (the first offer wins)."""
        if not self.enabled or self.layout is not None:
            return
        from ..pipeline.slots import SlotPool
        from ..platform.plan import slot_count

        # `for batch in loader` still holds the previous batch while the next is leased.
        self._count = slot_count(self._in_flight, layout.nbytes, self._budget_bytes)
        # A fixed count (no max_bytes growth): when the user keeps batches, a task
        # without a free slot gets fresh memory, which goes when the batch goes.
        max_bytes = None
        try:
            self._pool = self._make_pool(SlotPool, layout, max_bytes, self._mode)
        except PlatformError as exc:
            _log.warning("edgeload: loader slots in host memory: %s", exc)
            self._mode = "host"
            self._pool = self._make_pool(SlotPool, layout, max_bytes, "host")
        self.layout = layout

    def _make_pool(self, cls: Any, layout: _collate.SlotMap, max_bytes: Any, mode: str) -> Any:
        return cls(
            (layout.nbytes,),
            "uint8",
            count=self._count,
            max_bytes=max_bytes,
            mode=mode,
            shared=self._shared,
            name="edgeload-loader-slots",
            engine=self._engine if mode != "host" else None,
            # No task waits for a slot (one finding none writes fresh memory), so none
            # is held back from the consumer: a batch is a view whenever a slot was free.
            reserve=0,
        )

    @property
    def page_locked(self) -> bool:
        """Whether slot memory is already page-locked (a GPU mode): no pinning needed."""
        return self._pool is not None and self._mode != "host"

    def _layout_for(self, index: Any) -> _collate.SlotMap | None:
        """The slots' layout if a task of ``index`` fits a slot (a full batch), else None."""
        layout = self.layout
        if self._pool is None or layout is None or not isinstance(index, list):
            return None
        return layout if len(index) == layout.batch_size else None

    def acquire(self, index: Any) -> tuple[Any, _collate.SlotMap | None]:
        """A free slot for a task of ``index`` and its layout, or ``(None, None)``."""
        layout = self._layout_for(index)
        if layout is None:
            return None, None
        try:
            return self._pool.acquire(timeout_s=0), layout
        except TimeoutError:
            return None, None

    def claim(self, index: Any) -> tuple[SlotClaim | None, _collate.SlotMap | None]:
        """For a thread worker's task of ``index``: a claim on a slot that the worker
        takes when it starts writing, and the layout; or ``(None, None)``."""
        layout = self._layout_for(index)
        return (None, None) if layout is None else (SlotClaim(self._pool), layout)

    @staticmethod
    def settle(held: Any) -> Any:
        """The slot behind ``held`` (a slot, None, or a :class:`SlotClaim`), now the
        caller's to finish or release; a claim not yet taken can no longer take one."""
        return held.settle() if isinstance(held, SlotClaim) else held

    def release(self, slot: Any) -> None:
        """Give back a slot whose task produced nothing in it."""
        if slot is not None and self._pool is not None:
            self._pool.release(slot)

    def finish(self, slot: Any, result: Result, *, pin: bool = False) -> Any:
        """The batch of ``result``: views of its slot, or the data it carried; with
        ``pin``, in page-locked memory (a GPU mode's slots already are)."""
        if slot is None or not result.rows or self.layout is None:
            self.release(slot)
            batch = result.data
        else:
            view = self._pool.lease(slot)
            batch = _collate.read_batch(self.layout, view, result.rows)
            if self.page_locked:
                return batch
        return pin_batch(batch, self._engine) if pin else batch

    def stats(self) -> dict[str, Any]:
        """Slot counters (empty before the pool exists)."""
        if self._pool is None:
            return {}
        s = self._pool.stats()
        return {
            "slots": s.count,
            "slot_bytes": self.layout.nbytes if self.layout else 0,
            "slots_held_by_user": s.leased,
            "slots_in_use": s.acquired,
            "slot_copies": s.copies,
            "slot_gpu_waits": s.gpu_waits,
        }

    def close(self) -> None:
        """Free the pool (batches the user holds keep their memory mapped)."""
        if self._pool is not None:
            self._pool.close()
        self._pool = None
        self.layout = None


# Pinning a batch ----------------------------------------------------------------------


def map_tensors(fn: Callable[[Any], Any], value: Any) -> Any:
    """``value`` with ``fn`` applied to every tensor in it (dicts, lists, tuples, namedtuples)."""
    torch = require_torch()
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, collections.abc.Mapping):
        return type(value)({k: map_tensors(fn, v) for k, v in value.items()})  # type: ignore[call-arg]
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(map_tensors(fn, v) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(map_tensors(fn, v) for v in value)
    return value


def pin_batch(batch: Any, engine: Engine | None) -> Any:
    """``batch`` copied into page-locked memory (torch's ``pin_memory=True`` step)."""
    if engine is None:
        torch = require_torch()
        return torch.utils.data._utils.pin_memory.pin_memory(batch)
    return map_tensors(engine.pin, batch)
