"""The host engine's streams and events: in-order queues run by short-lived threads.

A :class:`HostStream` runs its work in order on a thread named
``edgeload-hostgpu-<name>`` that exists only while work is queued; a
:class:`HostEvent` completes when its stream reaches it, as a CUDA event does.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator

from ..errors import WaitTimeout

__all__ = ["WAIT_LIMIT_S", "HostEvent", "HostStream", "HostStreams"]

_log = logging.getLogger(__name__)

# A stream waiting on an event, or a caller synchronizing, gives up after this long:
# a test that deadlocks fails instead of hanging CI.
WAIT_LIMIT_S = 30.0


class HostEvent:
    """Completes when its stream has run everything queued before ``record``."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self._done.set()  # an unrecorded CUDA event counts as complete

    def record(self, stream: HostStream) -> None:
        self._done.clear()
        stream.submit(0.0, self._done.set)

    def query(self) -> bool:
        return self._done.is_set()

    def synchronize(self, timeout_s: float = WAIT_LIMIT_S) -> None:
        if not self._done.wait(timeout_s):
            raise WaitTimeout(f"host engine event not reached within {timeout_s} s")


class HostStream:
    """An in-order queue of work, run by a thread named ``edgeload-hostgpu-<name>``."""

    def __init__(self, name: str, *, legacy: bool = False) -> None:
        self.name = name
        self.legacy = legacy
        """The stand-in for CUDA's legacy NULL stream (``cuda_stream == 0``)."""
        self.cuda_stream = 0 if legacy else id(self)
        self._cond = threading.Condition()
        self._queue: collections.deque[tuple[float, Callable[[], None]]] = collections.deque()
        self._thread: threading.Thread | None = None
        self._running = False

    def submit(self, delay_s: float, work: Callable[[], None]) -> None:
        """Queue ``work`` to run after everything before it, ``delay_s`` after it starts."""
        with self._cond:
            self._queue.append((delay_s, work))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"edgeload-hostgpu-{self.name}", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._queue:
                    self._thread = None
                    self._running = False
                    self._cond.notify_all()
                    return
                delay_s, work = self._queue.popleft()
                self._running = True
            if delay_s > 0:
                time.sleep(delay_s)
            try:
                work()
            except Exception:  # a broken item must not stop the stream behind it
                _log.exception("edgeload: host engine work on stream %s failed", self.name)

    def query(self) -> bool:
        """Whether everything queued has run."""
        with self._cond:
            return not self._queue and not self._running

    def wait_event(self, event: HostEvent) -> None:
        """Make later work on this stream wait until ``event`` completes."""
        self.submit(0.0, lambda: event.synchronize())

    def synchronize(self, timeout_s: float = WAIT_LIMIT_S) -> None:
        """Block until everything queued so far has run."""
        event = HostEvent()
        event.record(self)
        event.synchronize(timeout_s)

    def idle_thread(self, timeout_s: float) -> bool:
        """Wait until the stream's thread has exited; False if it is still running."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._thread is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True


class HostStreams:
    """The host engine's streams: the legacy default one, those made since, and which
    one each thread has current (``use``)."""

    def __init__(self) -> None:
        self.default = HostStream("default", legacy=True)
        self._all = [self.default]
        self._local = threading.local()
        self._lock = threading.Lock()

    def current(self) -> HostStream:
        """The calling thread's current stream (the default one unless in ``use``)."""
        stream: HostStream | None = getattr(self._local, "stream", None)
        return stream if stream is not None else self.default

    def new(self) -> HostStream:
        with self._lock:
            stream = HostStream(f"stream-{len(self._all)}")
            self._all.append(stream)
        return stream

    @contextlib.contextmanager
    def use(self, stream: HostStream) -> Iterator[HostStream]:
        """Make ``stream`` the calling thread's current stream inside the block."""
        before = getattr(self._local, "stream", None)
        self._local.stream = stream
        try:
            yield stream
        finally:
            self._local.stream = before

    def synchronize(self, timeout_s: float) -> None:
        """Block until every stream has run what is queued on it."""
        with self._lock:
            streams = list(self._all)
        for stream in streams:
            stream.synchronize(timeout_s)

    def close(self, timeout_s: float) -> None:
        """Run what is queued and wait for the stream threads to exit."""
        self.synchronize(timeout_s)
        with self._lock:
            streams = list(self._all)
        for stream in streams:
            if not stream.idle_thread(timeout_s):
                _log.warning("edgeload: host engine stream %s still running", stream.name)
