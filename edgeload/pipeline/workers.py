"""Thread and process workers behind one interface.

A :class:`WorkerPool` runs ``fn(task)`` in ``num_workers`` threads or processes. Tasks go
to per-worker inboxes (``submit(task, worker=i)``, or round-robin); results come back on
one channel, tagged with the task index, in completion order. Exceptions travel as data
and are raised in the consumer as :class:`~edgeload.errors.WorkerError`; a worker process
that dies (SIGKILL, OOM killer) is noticed at once; a hung worker makes ``get`` raise
:class:`~edgeload.errors.WorkerTimeout`.

Threads suit work that releases the GIL (OpenCV decode and resize); processes suit
GIL-bound Python. Process workers should write array payloads into shared slots
(:mod:`edgeload.pipeline.slots`) and return only small metadata, so nothing large is pickled.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from typing import Any

from ..errors import ClosedError, EdgeloadError, WorkerError
from ..vocabulary import WorkerKind
from ._executors import start_executor
from ._lifecycle import EXIT_JOIN_TIMEOUT_S, POLL_INTERVAL_S, Lifecycle, interrupted
from ._pending import PendingTasks, WorkerResult
from ._worker_info import WorkerInfo, choose_start_method, current_worker

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "JOIN_TIMEOUT_S",
    "WorkerInfo",
    "WorkerKind",
    "WorkerPool",
    "WorkerResult",
    "choose_start_method",
    "current_worker",
]

DEFAULT_TIMEOUT_S = 10.0
"""How long ``get`` waits for a result before calling the worker hung (seconds)."""
JOIN_TIMEOUT_S = 2.0
"""How long ``close`` waits for workers to finish before terminating processes."""


def _check_arguments(
    name: str, kind: str, num_workers: int, timeout_s: float | None, threads_per_worker: int
) -> None:
    if kind not in ("thread", "process"):
        raise ValueError(f"{name}: kind must be 'thread' or 'process', got {kind!r}")
    if num_workers < 1:
        raise ValueError(f"{name}: num_workers must be >= 1, got {num_workers}")
    if timeout_s is not None and timeout_s <= 0:
        raise ValueError(f"{name}: timeout_s must be > 0 or None, got {timeout_s}")
    if threads_per_worker < 1:
        raise ValueError(f"{name}: threads_per_worker must be >= 1, got {threads_per_worker}")


class WorkerPool:
    """Run ``fn(task)`` in worker threads or processes; collect results by task index.

    One consumer thread calls ``submit`` and ``get``. The caller bounds how many tasks
    are outstanding (e.g. by the number of free slots); inboxes are not bounded.

    Args:
        fn: called as ``fn(task)`` in a worker; ``current_worker()`` tells which. For
            processes it must pickle (module-level function or ``functools.partial``).
        kind: ``"thread"`` or ``"process"``.
        num_workers: how many workers (>= 1).
        start_method: process start method; None chooses (see ``choose_start_method``).
        threads_per_worker: cap on OpenMP/BLAS/torch/cv2 threads in each process worker;
            thread workers share one process, so only cv2's pool is capped for them.
        init_fn: called once as ``init_fn(info)`` in each worker before its first task.
        timeout_s: default ``get`` timeout: no result for this long means a hung worker.
            None waits forever (still interruptible by Ctrl-C).
        seed: base seed; worker ``i`` gets ``seed + i`` in its ``WorkerInfo``.
        name: used in thread/process names (``edgeload-<name>-<i>``) and messages.

    Raises:
        ValueError: bad kind, count, timeout or start method; an unpicklable fn for
            process workers.
        PlatformError: ``fork`` requested after CUDA was initialised.
    """

    def __init__(
        self,
        fn: Callable[[Any], Any],
        *,
        kind: WorkerKind = "thread",
        num_workers: int = 1,
        start_method: str | None = None,
        threads_per_worker: int = 1,
        init_fn: Callable[[WorkerInfo], Any] | None = None,
        timeout_s: float | None = DEFAULT_TIMEOUT_S,
        seed: int = 0,
        name: str = "workers",
    ) -> None:
        _check_arguments(name, kind, num_workers, timeout_s, threads_per_worker)
        self.kind: WorkerKind = kind
        self.num_workers = num_workers
        self.timeout_s = timeout_s
        self.name = name
        self.start_method = choose_start_method(start_method) if kind == "process" else None
        self._tasks = PendingTasks(name, getattr(fn, "__qualname__", repr(fn)), num_workers)
        self._lifecycle = Lifecycle.OPEN
        self._executor = start_executor(
            fn,
            kind=kind,
            num_workers=num_workers,
            seed=seed,
            init_fn=init_fn,
            start_method=self.start_method or "spawn",
            threads_per_worker=threads_per_worker,
            name=name,
        )
        # Garbage collection or interpreter exit (an uncaught Ctrl-C): nobody wants the
        # results, so workers get only a moment before they are terminated.
        self._finalizer = weakref.finalize(self, self._executor.close, EXIT_JOIN_TIMEOUT_S)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._lifecycle is Lifecycle.CLOSED

    @property
    def pending(self) -> int:
        """Tasks submitted whose result ``get`` has not returned yet."""
        return len(self._tasks)

    @property
    def pids(self) -> list[int]:
        """Process ids of process workers (empty for threads)."""
        return self._executor.pids

    def _check_open(self, what: str) -> None:
        if self._lifecycle is Lifecycle.CLOSED:
            raise ClosedError(f"{self.name}: {what} after close()")

    def submit(self, task: Any, *, worker: int | None = None) -> int:
        """Queue ``task`` for worker ``worker`` (round-robin when None); return its index.

        Raises:
            ClosedError: the pool is closed.
            ValueError: no such worker.
            WorkerError: that worker process is dead.
        """
        self._check_open("submit()")
        index, wid = self._tasks.route(worker)
        try:
            self._executor.send(wid, index, task)
        except WorkerError as exc:
            raise self._tasks.death(exc, self._executor.dead_wid) from None
        self._tasks.add(index, wid)
        return index

    def get(self, *, timeout_s: float | None = None) -> WorkerResult:
        """Return the next finished task's result, in completion order.

        Args:
            timeout_s: most seconds to wait; None uses the pool's ``timeout_s``.

        Raises:
            ClosedError: the pool is closed.
            EdgeloadError: nothing is pending.
            WorkerError: the task raised (the original is ``__cause__``), ``init_fn``
                failed, or a worker process died (the message names its pid and signal).
            WorkerTimeout: no result within the timeout.
        """
        self._check_open("get()")
        if not self._tasks:
            raise EdgeloadError(f"{self.name}: get() with no task pending; submit() first")
        timeout = self.timeout_s if timeout_s is None else timeout_s
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = POLL_INTERVAL_S if deadline is None else deadline - time.monotonic()
            try:
                msg = self._executor.recv(min(left, POLL_INTERVAL_S))
            except WorkerError as exc:
                raise self._tasks.death(exc, self._executor.dead_wid) from None
            if msg is not None:
                return self._tasks.finish(*msg, describe=self._executor.describe)
            self._check_open("get()")
            if deadline is not None and time.monotonic() >= deadline:
                raise self._tasks.timeout(self.kind, timeout, self._executor)

    def close(self, *, timeout_s: float = JOIN_TIMEOUT_S) -> None:
        """Stop and join the workers (terminating processes that overrun); idempotent.

        Args:
            timeout_s: how long to wait for workers to finish their current task; while
                a KeyboardInterrupt propagates (``with`` exit on Ctrl-C), at most
                ``EXIT_JOIN_TIMEOUT_S``.
        """
        if self._lifecycle is Lifecycle.CLOSED:
            return
        self._lifecycle = Lifecycle.CLOSED
        self._finalizer.detach()
        self._executor.close(min(timeout_s, EXIT_JOIN_TIMEOUT_S) if interrupted() else timeout_s)
