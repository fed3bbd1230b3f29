"""Worker processes behind :class:`edgeload.pipeline.workers.WorkerPool`.

Each worker has a duplex pipe wrapped in a :class:`~edgeload.pipeline._channel.Channel`:
the parent never blocks on it. ``send`` queues the task and writes what the pipe takes;
the rest goes out while ``recv`` waits, and that wait also reads every result that has
arrived. So a parent and a worker can never deadlock by both writing to full pipes, and
a worker that stops reading or stops half-way through writing only makes ``recv`` come
back empty until the pool's timeout turns it into a :class:`~edgeload.errors.WorkerTimeout`
that names it.
"""

from __future__ import annotations

import collections
import contextlib
import multiprocessing
import pickle
import signal
import time
from collections.abc import Callable
from typing import Any

from ..errors import WorkerError
from ._channel import Channel, Undecodable, wait_ready
from ._child import Message, process_main
from ._lifecycle import POLL_INTERVAL_S, thread_env, thread_name

__all__ = ["ProcessExecutor", "start_processes"]

_MIB = 1 << 20
# After the join timeout, SIGTERM and then SIGKILL each get this long to take effect.
_KILL_WAIT_S = 0.5


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


def start_processes(
    fn: Callable[[Any], Any],
    *,
    infos: list[Any],
    init_fn: Callable[[Any], Any] | None,
    start_method: str,
    threads_per_worker: int,
    name: str,
) -> ProcessExecutor:
    """Start one worker process per ``infos`` entry; stop those started if one fails.

    Raises:
        ValueError: a process could not start (``fn`` or ``init_fn`` did not pickle).
    """
    payload: Any = (fn, init_fn)  # fork: the child inherits them, nothing is pickled
    if start_method != "fork":
        # Locks and shared values pickle only while a process is being spawned: if
        # this fails, Process pickles them then (and reports anything else).
        with contextlib.suppress(Exception):
            payload = pickle.dumps(payload)
    ctx = multiprocessing.get_context(start_method)
    channels: list[Channel] = []
    procs: list[Any] = []
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
            _stop(channels, procs, 0.0)
            raise ValueError(
                f"{name}: {start_method} process workers need a picklable fn and init_fn "
                f"(module-level functions, classes and functools.partial), got {fn!r}, "
                f"{init_fn!r}: {type(exc).__name__}: {exc}; define them at module "
                "level, start with 'fork' (Linux), or use kind='thread'"
            ) from exc
        child_conn.close()
        channels.append(Channel(parent_conn))
        procs.append(proc)
    return ProcessExecutor(channels, procs)


def _death(wid: int, proc: Any) -> WorkerError:
    """The error for worker ``wid`` whose process has gone: how, and the likely why."""
    proc.join(1.0)
    hint = (
        "a SIGKILL nobody sent is usually the kernel's OOM killer: use fewer workers "
        "or a smaller prefetch budget"
        if proc.exitcode == -signal.SIGKILL
        else "its init_fn failed (reported before) or fn exited the process"
        if proc.exitcode == 0
        else "its stderr above may say why"
    )
    return WorkerError(
        f"worker process {wid} (pid {proc.pid}) {_exit_text(proc.exitcode)}; "
        f"its pending items are lost; {hint}",
        worker=f"pid {proc.pid}",
    )


def _stop(channels: list[Channel], procs: list[Any], timeout_s: float) -> None:
    """Ask every worker to stop, wait up to ``timeout_s``, then terminate the rest."""
    for channel in channels:
        with contextlib.suppress(OSError):  # that worker is already gone
            channel.put(None)
    deadline = time.monotonic() + timeout_s
    while any(p.is_alive() for p in procs):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        # Keep reading (and dropping) results, so a worker blocked writing one
        # gets to see the stop; keep writing the stops that did not fit.
        writers = [ch for ch in channels if ch.unsent]
        readers = [ch for ch in channels if not ch.eof]
        alive = [p.sentinel for p in procs if p.is_alive()]
        wait_ready([*readers, *alive], writers, min(left, POLL_INTERVAL_S))
        for channel in channels:
            with contextlib.suppress(Exception):  # a broken pipe or a bad pickle: moot now
                channel.flush()
                channel.take()
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
            proc.join(_KILL_WAIT_S)
        if proc.is_alive():
            proc.kill()
            proc.join(_KILL_WAIT_S)
    for channel in channels:
        channel.close()
    for proc in procs:
        if not proc.is_alive():
            proc.close()


class ProcessExecutor:
    """Worker processes, each with a non-blocking duplex channel: tasks in, results out.

    The channels and the process sentinels are polled together, so a worker killed by
    a signal is noticed at once.
    """

    def __init__(self, channels: list[Channel], procs: list[Any]) -> None:
        self.channels, self.procs = channels, procs
        self.dead: WorkerError | None = None
        self.dead_wid = -1
        self._ready: collections.deque[Message] = collections.deque()
        self._unsent_since: dict[int, float] = {}

    def send(self, wid: int, index: int, task: Any) -> None:
        """Queue a task for worker ``wid``; never blocks (see the module docstring)."""
        if self.dead is not None:
            raise self.dead
        try:
            self.channels[wid].put((index, task))
        except (BrokenPipeError, ConnectionResetError):
            self._died(wid)
        self._note_unsent(wid)

    def _note_unsent(self, wid: int) -> None:
        if self.channels[wid].unsent:
            self._unsent_since.setdefault(wid, time.monotonic())
        else:
            self._unsent_since.pop(wid, None)

    def recv(self, timeout_s: float) -> Message | None:
        """Return the next result, waiting at most ``timeout_s``; None if none came.

        Raises:
            WorkerError: a worker process died (its last results are delivered first).
        """
        if self._ready:
            return self._ready.popleft()
        if self.dead is not None:
            raise self.dead
        fds = {ch.fd: wid for wid, ch in enumerate(self.channels)}
        sentinels = {p.sentinel: wid for wid, p in enumerate(self.procs)}
        writers = [ch for ch in self.channels if ch.unsent]
        readable, writable = wait_ready([*fds, *sentinels], writers, timeout_s)
        for fd in writable:
            self._flush(fds[fd])
        # Read pipes before looking at sentinels: a worker may have sent its last
        # result just before it died, and that result must not be lost.
        for fd in readable:
            if fd in fds:
                self._read(fds[fd])
        for fd in readable:
            if fd in sentinels and not self._ready:
                self._read(sentinels[fd])
                if not self._ready:
                    self._died(sentinels[fd])
        return self._ready.popleft() if self._ready else None

    def _flush(self, wid: int) -> None:
        try:
            self.channels[wid].flush()
        except (BrokenPipeError, ConnectionResetError):
            self._died(wid)
        self._note_unsent(wid)

    def _read(self, wid: int) -> None:
        channel = self.channels[wid]
        for msg in channel.take():
            if isinstance(msg, Undecodable):
                self._undecodable(wid, msg.exc)
            self._ready.append(msg)
        if channel.eof and not self._ready:
            self._died(wid)

    def _undecodable(self, wid: int, exc: Exception) -> None:
        """A result that needs its sender alive (a shared tensor) fails once it died:
        report the death; anything else (out of file descriptors here) as it is."""
        self.procs[wid].join(1.0)
        if not self.procs[wid].is_alive():
            self._died(wid)
        raise exc

    def _died(self, wid: int) -> None:
        self.dead_wid = wid
        self.dead = _death(wid, self.procs[wid])
        raise self.dead

    @property
    def pids(self) -> list[int]:
        """The workers' process ids."""
        return [p.pid for p in self.procs]

    def describe(self, wid: int) -> str:
        return f"process {wid} (pid {self.procs[wid].pid})"

    def stall(self, wid: int) -> str:
        """Why worker ``wid`` may be stuck on its pipe, for a timeout message ("" if not)."""
        channel = self.channels[wid]
        if wid in self._unsent_since:
            waited = time.monotonic() - self._unsent_since[wid]
            return (
                f"; it has not read {channel.unsent / _MIB:.1f} MiB of tasks for "
                f"{waited:.1f} s (its pipe is full)"
            )
        if channel.partial:
            return (
                f"; it stopped after writing {channel.partial / _MIB:.1f} MiB of a result "
                "(stopped or hung while sending)"
            )
        return ""

    def close(self, timeout_s: float) -> None:
        """Ask every worker to stop, wait up to ``timeout_s``, then terminate the rest."""
        _stop(self.channels, self.procs, timeout_s)
        self._ready.clear()
