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

The pool keeps the tasks it has out in :class:`PendingTasks`, which builds the errors
that name them: each names the pool, the worker and the items concerned, and says what
to try; the worker's own exception, when it travelled, is the ``__cause__``. Two
executors run the tasks, both taking them into per-worker inboxes and delivering
``Message`` tuples on one result channel: :class:`ThreadExecutor` here, and
:class:`~edgeload.pipeline._processes.ProcessExecutor`. Neither refers to the pool, so
the pool's finalizer can close them.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from .. import _args
from ..errors import ArgumentError, ClosedError, EdgeloadError, WorkerError, WorkerTimeout
from ..vocabulary import WORKER_KINDS, WorkerKind
from ._failure import Failure, user_error
from ._lifecycle import (
    EXIT_JOIN_TIMEOUT_S,
    POLL_INTERVAL_S,
    Lifecycle,
    interrupted,
    join_threads,
    limit_library_threads,
    thread_name,
)
from ._processes import (
    Message,
    ProcessExecutor,
    WorkerInfo,
    choose_start_method,
    current_worker,
    run_task,
    set_current,
    start_processes,
)

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


@dataclasses.dataclass(frozen=True)
class WorkerResult:
    """One finished task."""

    index: int
    """The index ``submit`` returned for the task."""
    value: Any
    worker: int
    """Id of the worker that ran it."""


class PendingTasks:
    """The tasks submitted whose result the consumer has not taken, and their workers.

    It numbers and routes tasks (round-robin unless a worker is named), turns each
    result message into a :class:`WorkerResult` or the task's error, and builds the
    errors for a dead worker (the items it took with it) and a timeout (the oldest).
    """

    def __init__(self, pool: str, fn_name: str, num_workers: int) -> None:
        self._pool, self._fn_name, self._num_workers = pool, fn_name, num_workers
        self._workers: dict[int, int] = {}  # task index -> worker id
        self._next_index = 0

    def __len__(self) -> int:
        return len(self._workers)

    def route(self, worker: int | None) -> tuple[int, int]:
        """The next task's index and its worker's id (round-robin when ``worker`` is None).

        Raises:
            ValueError: no such worker.
        """
        index, count = self._next_index, self._num_workers
        wid = index % count if worker is None else worker
        if not 0 <= wid < count:
            raise ArgumentError(f"{self._pool}: worker must be in 0..{count - 1}, got {wid}")
        return index, wid

    def add(self, index: int, wid: int) -> None:
        """Task ``index`` (from :meth:`route`) was sent to worker ``wid``."""
        self._workers[index] = wid
        self._next_index = index + 1

    def finish(
        self, index: int, wid: int, ok: bool, payload: Any, *, describe: Callable[[int], str]
    ) -> WorkerResult:
        """Task ``index`` is done: its result, or its failure raised as WorkerError.

        ``index`` < 0 is ``init_fn``'s failure; ``describe(wid)`` names the worker.
        """
        self._workers.pop(index, None)
        if ok:
            return WorkerResult(index, payload, wid)
        failure: Failure = payload
        who = describe(wid)
        what = "init_fn" if index < 0 else f"{self._fn_name} on item {index}"
        raise user_error(
            failure,
            "pool",
            owner=self._pool,
            what=what,
            index=None if index < 0 else index,
            worker=who,
        )

    def death(self, exc: WorkerError, wid: int) -> WorkerError:
        """Worker ``wid`` died (``exc`` from the executor); name the items it took with it."""
        # The executor keeps ``exc`` to raise again; its traceback would pin the caller's
        # frames (a DataLoader iterator and its slots) for the pool's lifetime.
        exc.__traceback__ = None
        lost = sorted(i for i, w in self._workers.items() if w == wid)
        return WorkerError(
            f"{self._pool}: {exc} (pending items: {lost or 'none'})",
            index=lost[0] if lost else None,
            worker=exc.worker,
        )

    def timeout(self, kind: str, timeout_s: float | None, executor: Any) -> WorkerTimeout:
        """No result within ``timeout_s``: name the oldest pending task and its worker."""
        first = min(self._workers)
        wid = self._workers[first]
        who = executor.describe(wid)
        return WorkerTimeout(
            f"{self._pool}: no result within {timeout_s} s from {kind} workers; "
            f"{len(self._workers)} task(s) pending (first: index {first} on "
            f"{who}{executor.stall(wid)}); {self._fn_name} may be hung or stuck on I/O; "
            "raise timeout_s= if it is just slow",
            index=first,
            worker=who,
        )


_STOP = object()


class ThreadExecutor:
    """Worker threads (daemon, so a Ctrl-C exit is never held up by a hung task)."""

    def __init__(
        self,
        fn: Callable[[Any], Any],
        *,
        infos: list[Any],
        init_fn: Callable[[Any], Any] | None,
        set_current: Callable[[Any], None],
        name: str,
    ) -> None:
        # SimpleQueue, not Queue: its put and get are C code, so a Ctrl-C in the
        # consumer cannot be raised inside Queue's Python lock handling and leave its
        # mutex held, which hung the next put.
        self.results: queue.SimpleQueue[Message] = queue.SimpleQueue()
        self.inboxes: list[queue.SimpleQueue[Any]] = [queue.SimpleQueue() for _ in infos]
        self.stop = threading.Event()
        self.dead_wid = -1
        self.threads = [
            threading.Thread(
                target=self._run,
                args=(fn, init_fn, info, set_current),
                name=thread_name(name, info.id),
                daemon=True,
            )
            for info in infos
        ]
        for thread in self.threads:
            thread.start()

    def _run(
        self,
        fn: Callable[[Any], Any],
        init_fn: Callable[[Any], Any] | None,
        info: Any,
        set_current: Callable[[Any], None],
    ) -> None:
        set_current(info)
        wid, inbox = info.id, self.inboxes[info.id]
        if init_fn is not None:
            out = run_task(init_fn, -1, wid, info, pickled=False)
            if not out[2]:
                self.results.put(out)
                return
        while not self.stop.is_set():
            try:
                msg = inbox.get(timeout=POLL_INTERVAL_S)
            except queue.Empty:
                continue
            if msg is _STOP:
                return
            self.results.put(run_task(fn, msg[0], wid, msg[1], pickled=False))

    def send(self, wid: int, index: int, task: Any) -> None:
        self.inboxes[wid].put((index, task))

    def recv(self, timeout_s: float) -> Message | None:
        try:
            return self.results.get(timeout=max(timeout_s, 0.0))
        except queue.Empty:
            pass
        for wid, thread in enumerate(self.threads):
            # A worker thread ends early only when its init_fn failed (already reported);
            # its queued tasks would otherwise wait forever.
            if not thread.is_alive() and not self.stop.is_set():
                self.dead_wid = wid
                raise WorkerError(
                    f"worker thread {thread.name} has ended (its init_fn failed); its "
                    "pending items are lost",
                    worker=thread.name,
                )
        return None

    @property
    def pids(self) -> list[int]:
        return []  # threads run in this process

    def describe(self, wid: int) -> str:
        return self.threads[wid].name

    def stall(self, wid: int) -> str:
        return ""  # queues in one process cannot fill up

    def close(self, timeout_s: float) -> None:
        self.stop.set()
        for inbox in self.inboxes:
            inbox.put(_STOP)
        join_threads(self.threads, timeout_s=timeout_s)


def start_executor(
    fn: Callable[[Any], Any],
    *,
    kind: str,
    num_workers: int,
    seed: int,
    init_fn: Callable[[Any], Any] | None,
    start_method: str,
    threads_per_worker: int,
    name: str,
) -> ThreadExecutor | ProcessExecutor:
    """Start ``num_workers`` workers of ``kind`` running ``fn`` (see WorkerPool's Args)."""
    infos = [
        WorkerInfo(
            id=i,
            num_workers=num_workers,
            seed=seed + i,
            kind=kind,  # type: ignore[arg-type]
            name=f"edgeload-{name}-{i}",
            stop_event=threading.Event(),
        )
        for i in range(num_workers)
    ]
    if kind == "thread":
        limit_library_threads(threads_per_worker, env=False, torch=False)
        threads = ThreadExecutor(
            fn, infos=infos, init_fn=init_fn, set_current=set_current, name=name
        )
        for info in infos:
            info.stop_event = threads.stop  # one stop for all: they share the process
        return threads
    return start_processes(
        fn,
        infos=infos,
        init_fn=init_fn,
        start_method=start_method,
        threads_per_worker=threads_per_worker,
        name=name,
    )


def _check_arguments(
    name: str, kind: str, num_workers: int, timeout_s: float | None, threads_per_worker: int
) -> WorkerKind:
    """The worker kind, normalised; every argument checked (ArgumentError)."""
    if not isinstance(name, str) or not name:
        raise ArgumentError(f"WorkerPool: name must be a non-empty str, got {name!r}")
    kind = _args.choice(name, "kind", kind, WORKER_KINDS,
                        allowed_text="'thread' or 'process'")  # fmt: skip
    _args.integer(name, "num_workers", num_workers, low=1)
    _args.number(name, "timeout_s", timeout_s, above=0, none_ok=True)
    _args.integer(name, "threads_per_worker", threads_per_worker, low=1)
    return kind  # type: ignore[return-value]


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
        ArgumentError: bad kind, count, timeout or start method (a ValueError; ``kind``
            in any case); an unpicklable fn for process workers.
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
        kind = _check_arguments(name, kind, num_workers, timeout_s, threads_per_worker)
        _args.integer(name, "seed", seed)
        if not callable(fn) or (init_fn is not None and not callable(init_fn)):
            raise ArgumentError(f"{name}: fn and init_fn must be callable, got {fn!r}, {init_fn!r}")
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
        if self._finalizer.detach() is None:
            return  # the finalizer stopped them (interpreter exit); their processes are closed
        self._executor.close(min(timeout_s, EXIT_JOIN_TIMEOUT_S) if interrupted() else timeout_s)
