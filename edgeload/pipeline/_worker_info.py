"""Who a worker is (``WorkerInfo``, ``current_worker``) and how processes start.

Separate from :mod:`edgeload.pipeline.workers` so a worker process can set its identity without
importing the pool machinery.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import sys
import threading
from typing import Any

from ..errors import PlatformError
from ..vocabulary import WorkerKind

__all__ = ["WorkerInfo", "WorkerKind", "choose_start_method", "current_worker", "set_current"]


@dataclasses.dataclass
class WorkerInfo:
    """Who the current worker is; ``current_worker()`` returns it inside a worker."""

    id: int
    """0 .. num_workers - 1."""
    num_workers: int
    seed: int
    """The pool's ``seed`` plus ``id``; the caller decides what to seed with it."""
    kind: WorkerKind
    name: str
    """The worker's thread or process name (``edgeload-...``)."""
    stop_event: threading.Event = dataclasses.field(repr=False, compare=False)
    """Set when the pool closes (threads) or the worker stops (processes); long tasks
    check it."""
    state: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False, compare=False)
    """Scratch space for this worker, e.g. an iterator made by ``init_fn``."""


_local = threading.local()
_process_info: WorkerInfo | None = None


def set_current(info: WorkerInfo) -> None:
    global _process_info
    if info.kind == "process":
        _process_info = info
    else:
        _local.info = info


def current_worker() -> WorkerInfo | None:
    """Return the calling worker's :class:`WorkerInfo`, or None outside a worker."""
    info: WorkerInfo | None = getattr(_local, "info", None)
    return info if info is not None else _process_info


def _cuda_initialised() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized())


def _os_thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def choose_start_method(requested: str | None = None) -> str:
    """Pick the process start method: ``fork`` only when it is safe, else forkserver/spawn.

    ``fork`` copies the parent's memory but not its threads: a lock held by another
    thread (a BLAS or OpenMP pool, an edgeload prefetch thread, CUDA's driver threads)
    stays locked forever in the child. So ``fork`` is chosen only while the process has
    one OS thread and CUDA is not initialised.

    Args:
        requested: a start method to validate and use, or None to choose.

    Raises:
        ValueError: ``requested`` is not available on this platform.
        PlatformError: ``fork`` requested after CUDA was initialised.
    """
    methods = multiprocessing.get_all_start_methods()
    if requested is not None:
        if requested not in methods:
            raise ValueError(f"start_method must be one of {methods}, got {requested!r}")
        if requested == "fork" and _cuda_initialised():
            raise PlatformError(
                "start_method='fork' after CUDA was initialised: the child cannot use "
                "CUDA and may deadlock; use 'forkserver' or 'spawn'"
            )
        return requested
    if "fork" in methods and _os_thread_count() == 1 and not _cuda_initialised():
        return "fork"
    return "forkserver" if "forkserver" in methods else "spawn"
