"""The errors a :class:`~edgeload.pipeline.workers.WorkerPool` raises in its consumer.

Each names the pool, the worker and the items concerned, and says what to try; the
worker's own exception, when it travelled, is the ``__cause__``.
"""

from __future__ import annotations

from typing import Any

from ..errors import WorkerError, WorkerTimeout
from .failure import Failure, worker_error

__all__ = ["death_error", "task_error", "timeout_error"]


def task_error(pool: str, fn_name: str, index: int, who: str, failure: Failure) -> WorkerError:
    """A task (``index`` >= 0) or ``init_fn`` (``index`` < 0) raised ``failure``."""
    what = "init_fn" if index < 0 else f"{fn_name} on item {index}"
    return worker_error(
        failure,
        f"{pool}: {what} raised {failure.type_name}: {failure.message} (in {who}).",
        index=None if index < 0 else index,
        worker=who,
    )


def death_error(pool: str, exc: WorkerError, pending: dict[int, int], wid: int) -> WorkerError:
    """Worker ``wid`` died (``exc`` from the executor); name the items it took with it.

    ``pending`` maps each pending task index to its worker id.
    """
    # The executor keeps ``exc`` to raise again; its traceback would pin the caller's
    # frames (a DataLoader iterator and its slots) for the pool's lifetime.
    exc.__traceback__ = None
    lost = sorted(i for i, w in pending.items() if w == wid)
    return WorkerError(
        f"{pool}: {exc} (pending items: {lost or 'none'})",
        index=lost[0] if lost else None,
        worker=exc.worker,
    )


def timeout_error(
    pool: str,
    kind: str,
    timeout_s: float | None,
    pending: dict[int, int],
    executor: Any,
    fn_name: str,
) -> WorkerTimeout:
    """No result within ``timeout_s``: name the oldest pending task and its worker."""
    first = min(pending)
    wid = pending[first]
    who = executor.describe(wid)
    return WorkerTimeout(
        f"{pool}: no result within {timeout_s} s from {kind} workers; {len(pending)} "
        f"task(s) pending (first: index {first} on {who}{executor.stall(wid)}); "
        f"{fn_name} may be hung or stuck on I/O; raise timeout_s= if it is just slow",
        index=first,
        worker=who,
    )
