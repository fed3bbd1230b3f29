"""The two worker implementations behind :class:`edgeload.pipeline.workers.WorkerPool`.

Both take tasks into per-worker inboxes and deliver ``Message`` tuples on one result
channel. Neither refers to the pool, so the pool's finalizer can close them.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from ..errors import WorkerError
from ._child import Message, run_task
from ._lifecycle import POLL_INTERVAL_S, join_threads, limit_library_threads, thread_name
from ._processes import ProcessExecutor, start_processes
from ._worker_info import WorkerInfo, set_current

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
        # mutex held, which hung the next put (issue #13).
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


__all__ = ["ProcessExecutor", "ThreadExecutor", "start_executor"]
