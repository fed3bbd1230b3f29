"""What runs inside a worker process.

Kept apart from ``workers.py`` so a spawned child imports little before it has capped
its thread pools: ``fn`` arrives pickled and is loaded only after
``limit_library_threads`` has set ``OMP_NUM_THREADS`` and friends.
"""

from __future__ import annotations

import collections
import os
import pickle
import signal
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, Tuple

from ..errors import PlatformError
from ._channel import Channel, wait_ready
from ._failure import Failure
from ._lifecycle import POLL_INTERVAL_S, limit_library_threads
from ._shm import SHM_DIR, detach_all
from ._shm import install as reserve_torch_shm

INIT_INDEX = -1
"""The task index a failed ``init_fn`` reports under."""


Message = Tuple[int, int, bool, Any]
"""``(task index, worker id, ok, value or Failure)``, from worker to consumer."""


def run_task(
    fn: Callable[[Any], Any], index: int, wid: int, task: Any, *, pickled: bool
) -> Message:
    """Run one task; an exception becomes a Failure message instead of escaping."""
    try:
        return (index, wid, True, fn(task))
    except BaseException as exc:
        return (index, wid, False, Failure.capture(exc, pickled=pickled))


def _explain(exc: Exception) -> Exception:
    """Name the fix when a result could not be sent because /dev/shm is full."""
    if isinstance(exc, PlatformError):
        return exc  # already says what to do (see _shm.install)
    text = str(exc)
    if "shared memory" not in text and "No space left" not in text:
        return exc
    err = PlatformError(
        f"a worker process could not hand over its result through {SHM_DIR} ({text}); it is "
        "too small for this batch size: in Docker start the container with a larger "
        "--shm-size (e.g. --shm-size=1g), or use thread workers (worker_kind='thread')"
    )
    err.__cause__ = exc
    return err


class _Stopped(Exception):
    """The parent asked this worker to stop, closed its pipe, or died."""


def _receive(channel: Channel, queued: collections.deque[Any], wait_s: float, parent: int) -> None:
    """Take every task that has arrived (waiting up to ``wait_s`` for one)."""
    if wait_s > 0:
        wait_ready([channel], [], wait_s)
    for msg in channel.take():
        if msg is None:
            raise _Stopped
        queued.append(msg)
    if channel.eof or os.getppid() != parent:
        raise _Stopped  # EOF, or orphaned: the parent died without closing


def _reply(channel: Channel, out: Message, queued: collections.deque[Any], parent: int) -> None:
    """Send one result; while the parent is not reading, keep taking tasks and stops."""
    try:
        try:
            reserve_torch_shm()  # torch may have been imported by the task just run
            channel.put(out)
        except (BrokenPipeError, ConnectionResetError):
            raise
        except Exception as exc:  # the result did not pickle or found no shared memory
            channel.put((out[0], out[1], False, Failure.capture(_explain(exc), pickled=True)))
        while not channel.flush():
            # A full pipe: the parent is busy in its own code. Wait for it, in steps, so
            # a stop or the parent's death still ends this worker.
            wait_ready([channel], [channel], POLL_INTERVAL_S)
            _receive(channel, queued, 0, parent)
    except (BrokenPipeError, ConnectionResetError):
        raise _Stopped from None


def process_main(
    conn: Connection,
    payload: bytes | tuple[Any, Any],
    info_fields: dict[str, Any],
    threads_per_worker: int,
) -> None:
    """Serve tasks from ``conn`` until ``None``, EOF or the parent's death."""
    # Ctrl-C reaches the whole process group; the parent alone decides how to stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    limit_library_threads(threads_per_worker)
    from ._worker_info import WorkerInfo, set_current

    fn, init_fn = pickle.loads(payload) if isinstance(payload, bytes) else payload
    info = WorkerInfo(**info_fields, stop_event=threading.Event())
    set_current(info)
    wid, parent = info.id, os.getppid()
    channel = Channel(conn)
    queued: collections.deque[tuple[int, Any]] = collections.deque()
    try:
        if init_fn is not None:
            out = run_task(init_fn, INIT_INDEX, wid, info, pickled=True)
            if not out[2]:
                _reply(channel, out, queued, parent)
                return
        while True:
            # Take everything waiting before the next task, so a stop (None) queued
            # behind many tasks is seen after the current task, not after all of them.
            _receive(channel, queued, 0 if queued else POLL_INTERVAL_S, parent)
            if queued:
                index, task = queued.popleft()
                _reply(channel, run_task(fn, index, wid, task, pickled=True), queued, parent)
    except _Stopped:
        return
    finally:
        info.stop_event.set()
        detach_all()
