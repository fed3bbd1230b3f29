"""Where the loader's tasks run: the calling thread, or a :class:`~edgeload.pipeline.workers.WorkerPool`.

Both executors take the same calls.  A worker's :class:`~edgeload.dataset._worker.WorkerStart`
(seed, resume point) travels with the first task sent to it after ``start_worker``, so
a worker that gets no task in an epoch costs nothing.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import functools
import os
import re
import signal
from typing import Any

from ..errors import EdgeloadError, WorkerDied, WorkerError, WorkerTimeout, worker_exception
from ..vocabulary import WorkerKind
from ._settings import LoaderSettings, LoaderWorkerKind, start_method_of
from ._worker import Fetcher, FetchSpec, Result, Task, WorkerStart

# torch's advice when the process runs out of file descriptors (each tensor a worker
# process returns travels as one): the same words, so the same searches find the fix.
_FD_HINT = (
    "Too many open files. Communication with the workers is no longer possible. Please "
    "increase the limit using `ulimit -n` in the shell or change the sharing strategy by "
    "calling `torch.multiprocessing.set_sharing_strategy('file_system')` at the beginning "
    "of your code (or return numpy arrays, or use worker_kind='thread')"
)


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
        from ..pipeline._worker_info import start_method_for
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
