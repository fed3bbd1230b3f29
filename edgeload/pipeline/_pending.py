"""The tasks a :class:`~edgeload.pipeline.workers.WorkerPool` has out, and the errors
that name them.

Each error names the pool, the worker and the items concerned, and says what to try;
the worker's own exception, when it travelled, is the ``__cause__``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ..errors import WorkerError, WorkerTimeout
from ._failure import Failure, worker_error

__all__ = ["PendingTasks", "WorkerResult"]


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
            raise ValueError(f"{self._pool}: worker must be in 0..{count - 1}, got {wid}")
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
        raise worker_error(
            failure,
            f"{self._pool}: {what} raised {failure.type_name}: {failure.message} (in {who}).",
            index=None if index < 0 else index,
            worker=who,
        ) from failure.exc

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
