"""The two worker implementations behind :class:`edgeload.pipeline.workers.WorkerPool`.

Both take tasks into per-worker inboxes and deliver ``Message`` tuples on one result
channel. Neither refers to the pool, so the pool's finalizer can close them.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import pickle
import queue
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import WorkerError
from ._child import Failure, Message, process_main, run_task
from .lifecycle import POLL_INTERVAL_S, join_threads, thread_env, thread_name

_STOP = object()


class ThreadBackend:
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
        self.results: queue.Queue[Message] = queue.Queue()
        self.inboxes: list[queue.Queue[Any]] = [queue.Queue() for _ in infos]
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

    def describe(self, wid: int) -> str:
        return self.threads[wid].name

    def close(self, timeout_s: float) -> None:
        self.stop.set()
        for inbox in self.inboxes:
            inbox.put(_STOP)
        join_threads(self.threads, timeout_s=timeout_s)


def _exit_text(exitcode: int | None) -> str:
    if exitcode is None:
        return "is gone"
    if exitcode < 0:
        try:
            sig = signal.Signals(-exitcode).name
        except ValueError:
            sig = f"signal {-exitcode}"
        return f"was killed by {sig} (exit code {exitcode})"
    return f"exited with code {exitcode}"


class ProcessBackend:
    """Worker processes, each with a duplex pipe: tasks in, results out.

    Results are read with ``multiprocessing.connection.wait`` over the pipes and the
    process sentinels together, so a worker killed by a signal is noticed at once.
    """

    def __init__(
        self,
        fn: Callable[[Any], Any],
        *,
        infos: list[Any],
        init_fn: Callable[[Any], Any] | None,
        start_method: str,
        threads_per_worker: int,
        name: str,
    ) -> None:
        payload: Any = (fn, init_fn)  # fork: the child inherits them, nothing is pickled
        if start_method != "fork":
            # Locks and shared values pickle only while a process is being spawned: if
            # this fails, Process pickles them then (and reports anything else).
            with contextlib.suppress(Exception):
                payload = pickle.dumps(payload)
        ctx = multiprocessing.get_context(start_method)
        self.conns: list[multiprocessing.connection.Connection] = []
        self.procs: list[Any] = []
        self.dead: WorkerError | None = None
        self.dead_wid = -1
        for info in infos:
            parent_conn, child_conn = ctx.Pipe(duplex=True)
            fields = {k: v for k, v in vars(info).items() if k != "stop_event"}
            proc = ctx.Process(  # type: ignore[attr-defined]
                target=process_main,
                args=(child_conn, payload, fields, threads_per_worker),
                name=thread_name(name, info.id),
                daemon=True,
            )
            # forkserver children inherit the server's environment: the first pool's cap.
            try:
                with thread_env(threads_per_worker):
                    proc.start()
            except Exception as exc:
                parent_conn.close()
                child_conn.close()
                self.close(0.0)
                raise ValueError(
                    f"{name}: {start_method} process workers need a picklable fn and init_fn "
                    f"(module-level functions, classes and functools.partial), got {fn!r}, "
                    f"{init_fn!r}: {type(exc).__name__}: {exc}; define them at module "
                    "level, start with 'fork' (Linux), or use kind='thread'"
                ) from exc
            child_conn.close()
            self.conns.append(parent_conn)
            self.procs.append(proc)

    def send(self, wid: int, index: int, task: Any) -> None:
        if self.dead is not None:
            raise self.dead
        try:
            self.conns[wid].send((index, task))
        except (BrokenPipeError, ConnectionResetError):
            self._died(wid)

    def recv(self, timeout_s: float) -> Message | None:
        if self.dead is not None:
            raise self.dead
        ready = multiprocessing.connection.wait(
            [*self.conns, *(p.sentinel for p in self.procs)], max(timeout_s, 0.0)
        )
        # Read pipes before looking at sentinels: a worker may have sent its last
        # result just before it died, and that result must not be lost.
        for wid, conn in enumerate(self.conns):
            if conn in ready:
                try:
                    msg: Message = conn.recv()
                    return msg
                except (EOFError, ConnectionResetError):
                    self._died(wid)
        for wid, proc in enumerate(self.procs):
            if proc.sentinel in ready:
                self._died(wid)
        return None

    def _died(self, wid: int) -> None:
        proc, self.dead_wid = self.procs[wid], wid
        proc.join(1.0)
        hint = (
            "a SIGKILL nobody sent is usually the kernel's OOM killer: use fewer workers "
            "or a smaller prefetch budget"
            if proc.exitcode == -signal.SIGKILL
            else "its init_fn failed (reported before) or fn exited the process"
            if proc.exitcode == 0
            else "its stderr above may say why"
        )
        self.dead = WorkerError(
            f"worker process {wid} (pid {proc.pid}) {_exit_text(proc.exitcode)}; "
            f"its pending items are lost; {hint}",
            worker=f"pid {proc.pid}",
        )
        raise self.dead

    def describe(self, wid: int) -> str:
        return f"process {wid} (pid {self.procs[wid].pid})"

    def close(self, timeout_s: float) -> None:
        for conn in self.conns:
            with contextlib.suppress(OSError):  # that worker is already gone
                conn.send(None)
        deadline = time.monotonic() + timeout_s
        for proc in self.procs:
            proc.join(max(0.0, deadline - time.monotonic()))
        for proc in self.procs:
            if proc.is_alive():
                proc.terminate()
                proc.join(0.5)
            if proc.is_alive():
                proc.kill()
                proc.join(0.5)
        for conn in self.conns:
            conn.close()
        for proc in self.procs:
            if not proc.is_alive():
                proc.close()


__all__ = ["Failure", "ProcessBackend", "ThreadBackend"]
