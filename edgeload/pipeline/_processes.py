"""Process workers behind :class:`edgeload.pipeline.workers.WorkerPool`: who a worker is,
how its process starts, the pipe it talks over, and what runs inside it.

Who a worker is (:class:`WorkerInfo`, :func:`current_worker`) lives here, beside the
child's main loop, so a worker process sets its identity without importing the pool
machinery; thread workers use the same record. :func:`choose_start_method` and
:func:`start_method_for` pick how worker processes start.

Each worker has a duplex pipe wrapped in a :class:`Channel`: the parent never blocks on
it. ``send`` queues the task and writes what the pipe takes; the rest goes out while
``recv`` waits, and that wait also reads every result that has arrived. So a parent and
a worker can never deadlock by both writing to full pipes, and a worker that stops
reading or stops half-way through writing only makes ``recv`` come back empty until the
pool's timeout turns it into a :class:`~edgeload.errors.WorkerTimeout` that names it.

Why a channel: ``Connection.send`` and ``recv`` block until the whole message has moved.
A parent that sends to a worker which stopped reading (hung, stopped, itself blocked
writing a result nobody reads) then waits forever, and Ctrl-C cannot get the user out; a
worker that stops half-way through writing a result does the same to ``recv``. A
:class:`Channel` keeps what it could not write yet in its own buffer, and assembles what
arrives a piece at a time, so every wait happens in a ``poll`` with a timeout that the
caller chooses. Each message is an 8-byte big-endian length and then the pickle
(``ForkingPickler``, as ``Connection.send`` uses, so torch tensors and file descriptors
travel the same way).

What runs inside a worker process (:func:`process_main`) is kept apart from
``workers.py`` so a spawned child imports little before it has capped its thread pools:
``fn`` arrives pickled and is loaded only after ``limit_library_threads`` has set
``OMP_NUM_THREADS`` and friends.
"""

from __future__ import annotations

import ast
import collections
import contextlib
import dataclasses
import functools
import io
import logging
import multiprocessing
import os
import pickle
import select
import signal
import struct
import sys
import threading
import time
import types
from collections.abc import Callable, Iterable
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from typing import Any, Tuple

from ..errors import ArgumentError, PlatformError, WorkerError
from ..vocabulary import WorkerKind
from ._failure import Failure
from ._lifecycle import POLL_INTERVAL_S, limit_library_threads, thread_env, thread_name
from ._shm import SHM_DIR, detach_all
from ._shm import install as reserve_torch_shm

__all__ = [
    "Channel",
    "Message",
    "ProcessExecutor",
    "Undecodable",
    "WorkerInfo",
    "WorkerKind",
    "choose_start_method",
    "current_worker",
    "process_main",
    "run_task",
    "set_current",
    "start_method_for",
    "start_processes",
    "wait_ready",
]


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
            raise ArgumentError(f"start_method must be one of {methods}, got {requested!r}")
        if requested == "fork" and _cuda_initialised():
            raise PlatformError(
                "start_method='fork' after CUDA was initialised: the child cannot use "
                "CUDA and may deadlock; use 'forkserver' or 'spawn'"
            )
        return requested
    if "fork" in methods and _os_thread_count() == 1 and not _cuda_initialised():
        return "fork"
    return "forkserver" if "forkserver" in methods else "spawn"


class _MainFinder(pickle.Pickler):
    """Pickles to nowhere, noting the modules of the classes and functions it refers to."""

    def __init__(self, file: Any) -> None:
        super().__init__(file)
        self.modules: set[str] = set()

    @property
    def uses_main(self) -> bool:
        return "__main__" in self.modules

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType)):
            module = getattr(obj, "__module__", None)
            if isinstance(module, str):
                self.modules.add(module)
        return NotImplemented


def _why_not_picklable(payload: Any) -> tuple[str, _MainFinder]:
    """('' or why ``payload`` does not pickle, what the pickling saw)."""
    finder = _MainFinder(io.BytesIO())
    try:
        finder.dump(payload)
    except Exception as exc:  # locals, lambdas, locks, shared values, open files...
        return f"{type(exc).__name__}: {exc}", finder
    return "", finder


@functools.lru_cache(maxsize=8)
def _has_main_guard(path: str) -> bool:
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, ValueError):
        return True  # cannot tell: assume the script is written for spawn
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare):
            names = [node.test.left, *node.test.comparators]
            text = {getattr(n, "id", None) for n in names} | {
                getattr(n, "value", None) for n in names
            }
            if {"__name__", "__main__"} <= text:
                return True
    return False


def _why_fork(payload: Any) -> tuple[str, set[str]]:
    """Why only ``fork`` can start workers for ``payload`` here ('' when others can),
    and the modules the workers would import to unpickle it."""
    failure, finder = _why_not_picklable(payload)
    why = _why_fork_given(failure, finder.uses_main)
    return why, finder.modules


def _why_fork_given(failure: str, uses_main: bool) -> str:
    if failure:
        return f"what the workers run does not pickle ({failure})"
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if path is None and uses_main:
        return (
            "it uses classes or functions of a main module that has no file (interactive "
            "session, notebook or -c), which spawn/forkserver workers cannot import"
        )
    if path is not None and not _has_main_guard(str(path)):
        return (
            "the main script has no `if __name__ == '__main__':` guard, so spawn/"
            "forkserver workers would run it again"
        )
    return ""


def start_method_for(requested: str | None, payload: Any) -> tuple[str, str]:
    """The start method for process workers that run ``payload``, and the reason.

    With no request: ``fork`` where only fork can load ``payload`` (it does not pickle,
    or spawn would re-run an unguarded main script), as torch's default start method on
    Linux does; otherwise fork while the process has one thread, else forkserver.

    Raises:
        ValueError / PlatformError: as :func:`choose_start_method`; and when only fork
            could start these workers but CUDA is initialised.
    """
    if requested is not None:
        return choose_start_method(requested), "requested (multiprocessing_context)"
    methods = multiprocessing.get_all_start_methods()
    if "fork" not in methods:
        method = multiprocessing.get_start_method(allow_none=False)
        return method, f"this platform cannot fork: its default, {method}"
    why, modules = _why_fork(payload)
    if why and _cuda_initialised():
        raise PlatformError(
            f"process workers would need fork ({why}), but CUDA is initialised and a "
            "forked worker cannot use it; define the dataset at module level (so spawn "
            "can load it), or use worker_kind='thread'"
        )
    if why:
        return "fork", f"fork, as torch does: {why}"
    method = choose_start_method()
    if method == "forkserver":
        _preload_forkserver(modules)
    return method, _default_reason()


_FORKSERVER_PRELOAD = ["__main__", "numpy", "torch"]


def _preload_forkserver(modules: set[str]) -> None:
    """Have the fork server import torch and the dataset's modules once, before it forks.

    Each forkserver worker otherwise imports them itself when it unpickles its dataset:
    seconds per worker on a small board (torch alone takes one or two). It takes effect
    only when the server starts, which is the first time any code uses forkserver.
    """
    forkserver = sys.modules.get("multiprocessing.forkserver")
    server = getattr(forkserver, "_forkserver", None)
    if server is not None and getattr(server, "_forkserver_pid", None) is None:
        extra = sorted(m for m in modules if m != "__main__" and not m.startswith("_"))
        multiprocessing.set_forkserver_preload([*_FORKSERVER_PRELOAD, *extra])


def _default_reason() -> str:
    if _cuda_initialised():
        return "CUDA is initialised: forked workers could not use it"
    threads = _os_thread_count()
    if threads == 1:
        return "one thread in this process: fork is safe and starts fastest"
    return (
        f"{threads} threads in this process: a forked worker could inherit a lock one of "
        "them holds; forkserver starts clean (pass multiprocessing_context='fork' to fork)"
    )


# The pipe between the parent and a worker process.

_HEADER = struct.Struct("!Q")
_READ_CHUNK = 1 << 20


class Undecodable:
    """Stands in for a message that arrived whole but could not be unpickled."""

    def __init__(self, exc: Exception) -> None:
        self.exc = exc


class Channel:
    """Buffered, non-blocking messages over ``conn``'s socket (which it keeps open).

    Args:
        conn: one end of ``multiprocessing.Pipe(duplex=True)``.
    """

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self.fd = conn.fileno()
        os.set_blocking(self.fd, False)
        self._out = bytearray()
        self._in = bytearray()
        self.eof = False
        """The other end closed (or died): nothing more will arrive."""

    def fileno(self) -> int:
        return self.fd

    @property
    def unsent(self) -> int:
        """Bytes queued that the other end has not taken yet."""
        return len(self._out)

    @property
    def partial(self) -> int:
        """Bytes of a message that has started to arrive but is not complete."""
        return len(self._in)

    def put(self, obj: Any) -> None:
        """Queue ``obj`` and send what the socket takes now; never blocks.

        Raises:
            Exception: ``obj`` does not pickle (nothing is queued then).
            BrokenPipeError, ConnectionResetError: the other end is gone.
        """
        data = ForkingPickler.dumps(obj)
        try:
            self._out += _HEADER.pack(len(data))
            self._out += data
        finally:
            # A view of the pickler's BytesIO: one kept past here (by a traceback of a
            # failed flush) makes that BytesIO's close at collection raise BufferError.
            data.release()
        self.flush()

    def flush(self) -> bool:
        """Write what the socket takes without blocking; True once nothing is left."""
        while self._out:
            try:
                sent = os.write(self.fd, self._out[:_READ_CHUNK])
            except BlockingIOError:
                return False
            del self._out[:sent]
        return True

    def take(self) -> list[Any]:
        """Read what has arrived without blocking; return the complete messages.

        A message that does not unpickle comes back as :class:`Undecodable`; ``eof``
        tells when the other end is gone.
        """
        while not self.eof:
            try:
                chunk = os.read(self.fd, _READ_CHUNK)
            except BlockingIOError:
                break
            except ConnectionResetError:
                # The other end closed with our data unread; what it sent before is
                # already here and still counts.
                self.eof = True
                break
            if not chunk:
                self.eof = True
            self._in += chunk
        messages = []
        while len(self._in) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(self._in)
            end = _HEADER.size + size
            if len(self._in) < end:
                break
            data = bytes(self._in[_HEADER.size : end])
            del self._in[:end]
            try:
                messages.append(ForkingPickler.loads(data))
            except Exception as exc:  # e.g. a tensor whose sender died before we attached
                messages.append(Undecodable(exc))
        return messages

    def close(self) -> None:
        self._conn.close()


def wait_ready(
    readers: Iterable[Any], writers: Iterable[Any], timeout_s: float
) -> tuple[set[int], set[int]]:
    """Wait at most ``timeout_s`` for any of ``readers`` (or sentinels) to be readable or
    ``writers`` writable; return the ready file descriptors as (readable, writable).

    Uses ``poll``, which has no limit on descriptor numbers (``select`` stops at 1024).
    A hang-up or error counts as readable, so the caller reads and sees the end.
    """
    poller = select.poll()
    masks: dict[int, int] = {}
    for obj in readers:
        fd = obj if isinstance(obj, int) else obj.fileno()
        masks[fd] = masks.get(fd, 0) | select.POLLIN
    for obj in writers:
        fd = obj if isinstance(obj, int) else obj.fileno()
        masks[fd] = masks.get(fd, 0) | select.POLLOUT
    for fd, mask in masks.items():
        poller.register(fd, mask)
    readable, writable = set(), set()
    for fd, event in poller.poll(max(0, int(timeout_s * 1000 + 0.999))):
        if event & (select.POLLIN | select.POLLHUP | select.POLLERR | select.POLLNVAL):
            readable.add(fd)
        if event & select.POLLOUT:
            writable.add(fd)
    return readable, writable


# What runs inside a worker process.

INIT_INDEX = -1
"""The task index a failed ``init_fn`` reports under."""

STARTED_INDEX = -2
"""The index of the message a worker sends once it runs, before ``init_fn``."""


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
    fn, init_fn = pickle.loads(payload) if isinstance(payload, bytes) else payload
    info = WorkerInfo(**info_fields, stop_event=threading.Event())
    set_current(info)
    wid, parent = info.id, os.getppid()
    channel = Channel(conn)
    queued: collections.deque[tuple[int, Any]] = collections.deque()
    try:
        try:  # for the parent's start watch (see ProcessExecutor)
            channel.put((STARTED_INDEX, wid, True, None))
        except (BrokenPipeError, ConnectionResetError):
            return
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


# The parent's side: starting, watching and stopping the worker processes.

_MIB = 1 << 20
# After the join timeout, SIGTERM and then SIGKILL each get this long to take effect.
_KILL_WAIT_S = 0.5
# A forked worker imports nothing before its first message, so it sends it within a
# second even under emulation. One still silent after this long is stuck on a lock
# another thread of the parent held at the fork, and will never run: it is killed and
# forked again, a few times, then reported. (glibc 2.31, as on JetPack 5, leaves the
# child the dynamic loader's lock that a thread ending at that moment held.)
FORK_START_TIMEOUT_S = 30.0
_FORK_START_ATTEMPTS = 3

_log = logging.getLogger("edgeload")


@dataclasses.dataclass
class _Starting:
    """A worker whose first message has not been read: when it was started (which
    attempt), and, for a forked one, the tasks sent to it, to send again to the process
    that replaces it."""

    since: float
    attempt: int = 1
    tasks: list[tuple[int, Any]] = dataclasses.field(default_factory=list)


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


@dataclasses.dataclass
class _Launcher:
    """How a pool's worker processes start: each at first, and one again that never ran."""

    ctx: Any
    payload: Any
    threads_per_worker: int
    name: str
    start_method: str

    def launch(self, info: Any) -> tuple[Channel, Any]:
        """Start the worker process for ``info``; its channel and process.

        Raises:
            Exception: the process did not start (nothing is left open then).
        """
        parent_conn, child_conn = self.ctx.Pipe(duplex=True)
        fields = {k: v for k, v in vars(info).items() if k != "stop_event"}
        proc = self.ctx.Process(
            target=process_main,
            args=(child_conn, self.payload, fields, self.threads_per_worker),
            name=thread_name(self.name, info.id),
            daemon=True,
        )
        # forkserver children inherit the server's environment: the first pool's cap.
        try:
            with thread_env(self.threads_per_worker):
                proc.start()
        except BaseException:
            parent_conn.close()
            child_conn.close()
            raise
        child_conn.close()
        return Channel(parent_conn), proc


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
    launcher = _Launcher(
        multiprocessing.get_context(start_method), payload, threads_per_worker, name, start_method
    )
    channels: list[Channel] = []
    procs: list[Any] = []
    for info in infos:
        try:
            channel, proc = launcher.launch(info)
        except Exception as exc:
            _stop(channels, procs, 0.0)
            raise ArgumentError(
                f"{name}: {start_method} process workers need a picklable fn and init_fn "
                f"(module-level functions, classes and functools.partial), got {fn!r}, "
                f"{init_fn!r}: {type(exc).__name__}: {exc}; define them at module "
                "level, start with 'fork' (Linux), or use kind='thread'"
            ) from exc
        channels.append(channel)
        procs.append(proc)
    return ProcessExecutor(channels, procs, launcher=launcher, infos=infos)


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
    a signal is noticed at once. Each worker's first message says it runs; a forked one
    that has not sent it within ``FORK_START_TIMEOUT_S`` is forked again, and gets the
    tasks its stuck predecessor was sent.
    """

    def __init__(
        self,
        channels: list[Channel],
        procs: list[Any],
        *,
        launcher: _Launcher | None = None,
        infos: list[Any] | None = None,
    ) -> None:
        self.channels, self.procs = channels, procs
        self.dead: WorkerError | None = None
        self.dead_wid = -1
        self._ready: collections.deque[Message] = collections.deque()
        self._unsent_since: dict[int, float] = {}
        # Only forked workers are watched as they start (see FORK_START_TIMEOUT_S):
        # spawned ones import the dataset first, and no bound fits every dataset.
        self._refork = (
            launcher if launcher is not None and launcher.start_method == "fork" else None
        )
        self._infos = infos or []
        now = time.monotonic()
        self._starting = {wid: _Starting(now) for wid in range(len(procs))}

    def send(self, wid: int, index: int, task: Any) -> None:
        """Queue a task for worker ``wid``; never blocks (see the module docstring)."""
        if self.dead is not None:
            raise self.dead
        try:
            self.channels[wid].put((index, task))
        except (BrokenPipeError, ConnectionResetError):
            self._died(wid)
        self._note_unsent(wid)
        starting = self._starting.get(wid)
        if starting is not None and self._refork is not None:
            starting.tasks.append((index, task))

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
        if self._starting and self._refork is not None:
            self._watch_starts(self._refork)
        return self._ready.popleft() if self._ready else None

    def _watch_starts(self, launcher: _Launcher) -> None:
        """Fork again each forked worker silent for ``FORK_START_TIMEOUT_S`` (see there)."""
        now = time.monotonic()
        for wid, starting in list(self._starting.items()):
            if now - starting.since < FORK_START_TIMEOUT_S or not self.procs[wid].is_alive():
                continue  # a worker that died is reported through its sentinel
            self._read(wid)  # its first message may have come in the meantime
            if wid in self._starting:
                self._fork_again(wid, starting, launcher)

    def _fork_again(self, wid: int, starting: _Starting, launcher: _Launcher) -> None:
        old = self.procs[wid]
        pid, waited = old.pid, time.monotonic() - starting.since
        what = (
            f"worker process {wid} (pid {pid}) was forked {waited:.0f} s ago and has "
            "not started: it is stuck on a lock another thread of this process held at "
            "the fork"
        )
        fix = (
            "start workers with multiprocessing_context='forkserver' or 'spawn' in a "
            "program with threads, or fork before starting threads"
        )
        old.kill()
        old.join(_KILL_WAIT_S)
        if starting.attempt >= _FORK_START_ATTEMPTS:
            self.dead_wid = wid
            self.dead = WorkerError(
                f"{what}, as each of its {starting.attempt} forks was; {fix}",
                worker=f"pid {pid}",
            )
            raise self.dead
        _log.warning("edgeload: %s; it was killed and forked again. To avoid it: %s", what, fix)
        try:
            channel, proc = launcher.launch(self._infos[wid])
        except Exception as exc:
            self.dead_wid = wid
            self.dead = WorkerError(
                f"{what}; forking it again failed: {type(exc).__name__}: {exc}",
                worker=f"pid {pid}",
            )
            raise self.dead from exc
        self.channels[wid].close()
        self.channels[wid], self.procs[wid] = channel, proc
        if not old.is_alive():
            old.close()
        self._unsent_since.pop(wid, None)
        self._starting[wid] = _Starting(time.monotonic(), starting.attempt + 1)
        for index, task in starting.tasks:
            self.send(wid, index, task)

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
            if msg[0] == STARTED_INDEX:
                self._starting.pop(wid, None)
                continue
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
        starting = self._starting.get(wid)
        if starting is not None:
            return (
                f"; it has not started {time.monotonic() - starting.since:.1f} s after its "
                "process was started"
            )
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
