"""Shared lifecycle pieces: the poll interval, the unopened/open/closed enum, thread joins.

Every loop that waits in edgeload wakes at least every :data:`POLL_INTERVAL_S` to check
its stop event, so a close() or Ctrl-C is noticed within that time.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import queue
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

from ..errors import ArgumentError

__all__ = [
    "EXIT_JOIN_TIMEOUT_S",
    "POLL_INTERVAL_S",
    "Lifecycle",
    "Wakeups",
    "interrupted",
    "join_threads",
    "limit_library_threads",
    "release_frames",
    "scoped_environ",
    "thread_env",
    "thread_name",
    "weak_call",
]

R = TypeVar("R")

_log = logging.getLogger("edgeload")

POLL_INTERVAL_S = 0.05
"""How often blocked loops wake to check their stop event (seconds)."""
EXIT_JOIN_TIMEOUT_S = 0.2
"""How long a close during Ctrl-C, or at garbage collection or interpreter exit, waits
for threads and workers to finish what they hold before giving up on (or terminating)
them: Ctrl-C must end the program within 2 s on a busy board."""


def interrupted() -> bool:
    """Whether a KeyboardInterrupt is propagating through the caller (e.g. ``__exit__``).

    A close then waits only :data:`EXIT_JOIN_TIMEOUT_S`: the user asked to stop, and
    the work in hand is not wanted.
    """
    return isinstance(sys.exc_info()[1], KeyboardInterrupt)


_THREAD_ENV_VARS = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
)


class Lifecycle(enum.Enum):
    """Where an object that owns threads, processes or memory is in its life.

    Not to be confused with the loaders' checkpoint, ``state_dict()``.

    Pools and prefetchers are ``OPEN`` from construction; the loaders start
    ``UNOPENED`` (planned, nothing running) and open on their first ``iter()``.
    """

    UNOPENED = "unopened"
    OPEN = "open"
    CLOSED = "closed"


def release_frames(exc: BaseException) -> None:
    """Clear the locals of the finished frames in ``exc``'s traceback and its chain.

    A user who keeps an exception (``pytest.raises``, a retry loop that logs it later)
    keeps every frame it passed through, and with them the loader and its shared
    memory. The file names and line numbers stay; only the locals go.
    """
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        item = pending.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        traceback.clear_frames(item.__traceback__)  # skips frames still running
        pending += [item.__cause__, item.__context__]


def weak_call(method: Callable[..., R], gone: Callable[[], R]) -> Callable[..., R]:
    """``method`` for a thread to hold without keeping its object alive.

    A loader whose threads hold its bound methods is never collected, so one dropped
    without ``close()`` runs forever. Through this, the loader can be collected (its
    finalizer then stops the threads); a call after that returns ``gone()``.
    """
    ref = weakref.WeakMethod(method)

    def call(*args: Any) -> R:
        bound = ref()
        return gone() if bound is None else bound(*args)

    return call


def thread_name(name: str, index: int | None = None) -> str:
    """Return the ``edgeload-...`` thread name for ``name`` (and worker ``index``)."""
    base = name if name.startswith("edgeload") else f"edgeload-{name}"
    return base if index is None else f"{base}-{index}"


def join_threads(threads: Iterable[threading.Thread], *, timeout_s: float) -> list[str]:
    """Join ``threads`` within ``timeout_s`` in total; log and return the names still alive."""
    deadline = time.monotonic() + timeout_s
    alive = []
    for thread in threads:
        if thread is threading.current_thread():
            continue
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            alive.append(thread.name)
    if alive:
        _log.warning(
            "edgeload: %d thread(s) still running %.1f s after close(): %s; they are daemon "
            "threads blocked in user code and end with the interpreter",
            len(alive),
            timeout_s,
            ", ".join(alive),
        )
    return alive


def limit_library_threads(num_threads: int, *, env: bool = True, torch: bool = True) -> None:
    """Cap OpenMP/BLAS, torch and OpenCV thread pools at ``num_threads``.

    The environment variables only take effect in libraries not yet loaded, so a
    worker process calls this first thing. torch and cv2 are adjusted only when
    already imported: importing them here would cost seconds on a Pi.

    Args:
        num_threads: threads each library may use (>= 1).
        env: also set ``OMP_NUM_THREADS`` and the BLAS variables.
        torch: also call ``torch.set_num_threads`` (process-wide; thread workers skip it
            because the model shares the process).

    Raises:
        ValueError: ``num_threads`` below 1.
    """
    if num_threads < 1:
        raise ArgumentError(f"threads_per_worker must be >= 1, got {num_threads}")
    if env:
        for var in _THREAD_ENV_VARS:
            os.environ[var] = str(num_threads)
    torch_mod = sys.modules.get("torch")
    if torch and torch_mod is not None:
        torch_mod.set_num_threads(num_threads)
    cv2_mod = sys.modules.get("cv2")
    if cv2_mod is not None:
        cv2_mod.setNumThreads(num_threads)


@contextlib.contextmanager
def scoped_environ(values: Mapping[str, str]) -> Iterator[None]:
    """Set ``values`` in ``os.environ`` for the block, then put back what was there (a
    variable that was unset is unset again).  No lock: callers that may overlap hold one."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, old in saved.items():
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old


@contextlib.contextmanager
def thread_env(num_threads: int) -> Iterator[None]:
    """Set the OpenMP/BLAS thread variables while a worker process starts, then restore.

    A spawned child reads its environment before it imports anything, so numpy's BLAS
    pool is sized by these, not by the machine's core count.
    """
    with scoped_environ({var: str(num_threads) for var in _THREAD_ENV_VARS}):
        yield


class Wakeups:
    """Wake-ups for threads waiting on something that another thread, or a weakref
    callback, makes ready. ``post`` and ``wait`` are ``SimpleQueue`` calls, C code: a
    callback that is ``post`` runs no Python, and a ``wait`` holds no lock, so Ctrl-C
    can be neither lost in the one nor leave a lock held in the other.
    """

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self.post = self._queue.put
        """Wake one waiter; takes any one argument (a weakref callback passes the ref)."""

    def wait(self, timeout_s: float) -> None:
        """Return at the next ``post`` (or one not yet waited for), or after ``timeout_s``."""
        try:  # noqa: SIM105 - suppress() is Python code, where Ctrl-C could chain onto Empty
            self._queue.get(timeout=max(0.0, timeout_s))
        except queue.Empty:
            pass

    def post_once(self) -> None:
        """``post`` unless a wake-up already waits: at most one piles up."""
        if self._queue.empty():
            self._queue.put(None)

    def clear(self) -> None:
        """Forget the wake-ups nobody waited for."""
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                return
