"""The stall guard: network timeouts for an OpenCV that cannot pass them to FFmpeg.

Below OpenCV 4.5.4 a ``cv2.VideoCapture`` open or read on a camera that accepted the
connection and went silent blocks inside FFmpeg, beyond the reach of Python, for as long as
OpenCV's own fixed limit. The reader cannot check its stop flag meanwhile, so neither a
reconnect nor ``close()`` happens. The guard is one thread per such stream: when the reader
has been inside one open or read for longer than the source's timeout, it shuts down this
process's TCP connections to the stream's address. FFmpeg's blocked call then sees the
connection end and returns at once, and the reader reconnects (or stops, when asked to).

Two sources on the same camera address share its connections' fate: both reconnect.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import Any, Tuple
from urllib.parse import urlsplit

import psutil

from ..pipeline._lifecycle import POLL_INTERVAL_S
from ._cv_features import capture_features
from .capture import NETWORK_KINDS, Target

_log = logging.getLogger("edgeload")
_DEFAULT_PORTS = {"rtsp": 554, "rtsps": 322, "http": 80, "https": 443}

Address = Tuple[str, int]
_RECUT_S = 0.5  # while a cut call is still blocked, cut again this often


def remote_addresses(url: str) -> set[Address]:
    """The (ip, port) pairs ``url``'s host resolves to; empty when it does not resolve."""
    parts = urlsplit(url)
    host = parts.hostname
    if not host:
        return set()
    try:
        port = parts.port or _DEFAULT_PORTS.get(parts.scheme.lower(), 80)
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, ValueError):
        return set()
    return {(str(info[4][0]), int(info[4][1])) for info in infos}


def cut_connections(addresses: set[Address]) -> int:
    """Shut down this process's TCP connections to ``addresses``; return how many."""
    proc = psutil.Process()
    # psutil 6 renamed connections() (which now warns) to net_connections()
    list_connections = getattr(proc, "net_connections", None) or proc.connections
    try:
        connections = list_connections(kind="tcp")
    except psutil.Error:
        return 0
    cut = 0
    for conn in connections:
        if conn.fd < 0 or not conn.raddr or (conn.raddr[0], conn.raddr[1]) not in addresses:
            continue
        try:
            # a duplicate of FFmpeg's descriptor: shutdown acts on the shared connection,
            # and closing the duplicate leaves FFmpeg's own descriptor to FFmpeg
            with socket.socket(fileno=os.dup(conn.fd)) as sock:
                sock.shutdown(socket.SHUT_RDWR)
            cut += 1
        except OSError:
            continue  # closed meanwhile
    return cut


class StallGuard:
    """Cuts a stream's connection when its reader stays blocked in OpenCV too long.

    The reader calls :meth:`enter` before each open or read with that call's timeout and
    :meth:`leave` after it. ``stop()`` also cuts at once when the reader is blocked, so
    closing a loader does not wait for a silent camera.
    """

    def __init__(self, url: str, *, name: str) -> None:
        self._url = url
        self._addresses: set[Address] = set()
        self._lock = threading.Lock()
        self._deadline: float | None = None
        self._stop = threading.Event()
        self.cuts = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        """Resolve the stream's address (in the reader's thread) and start watching."""
        self._addresses = remote_addresses(self._url)
        self._thread.start()

    def enter(self, timeout_s: float) -> None:
        """The reader is about to block in OpenCV for at most ``timeout_s``."""
        with self._lock:
            self._deadline = time.monotonic() + timeout_s

    def leave(self) -> None:
        """The reader's call returned."""
        with self._lock:
            self._deadline = None

    def _blocked(self) -> bool:
        with self._lock:
            return self._deadline is not None

    def stop(self) -> None:
        """Stop watching; a reader blocked right now is released at once (and cut again
        each poll until its call returns)."""
        self._stop.set()
        if self._blocked():
            self._cut("the stream is closing")

    def join(self, timeout_s: float) -> bool:
        """Wait for the guard thread; return whether it has ended."""
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _run(self) -> None:
        # After stop() the thread stays while the reader is still blocked, cutting each
        # poll: FFmpeg may open a new connection inside the same call (HTTP does).
        while True:
            stopping = self._stop.wait(POLL_INTERVAL_S)
            with self._lock:
                now = time.monotonic()
                blocked = self._deadline is not None
                late = blocked and (stopping or now > (self._deadline or now))
                if late and not stopping:
                    self._deadline = now + _RECUT_S  # while still blocked, cut again
            if stopping and not blocked:
                return
            if late:
                self._cut("the stream is closing" if stopping else "no answer within the timeout")

    def _cut(self, why: str) -> None:
        n = cut_connections(self._addresses)
        self.cuts += n
        if n:
            _log.info(
                "edgeload: %s: %s; cut %d connection(s) to free the reader", self._url, why, n
            )


class GuardedCapture:
    """A ``cv2.VideoCapture`` whose blocking reads are watched by a :class:`StallGuard`."""

    def __init__(self, cap: Any, guard: StallGuard, read_timeout_s: float) -> None:
        self._cap = cap
        self._guard = guard
        self._timeout_s = read_timeout_s

    def grab(self) -> bool:
        self._guard.enter(self._timeout_s)
        try:
            return bool(self._cap.grab())
        finally:
            self._guard.leave()

    def read(self, *args: Any, **kwargs: Any) -> Any:
        self._guard.enter(self._timeout_s)
        try:
            return self._cap.read(*args, **kwargs)
        finally:
            self._guard.leave()

    def __getattr__(self, name: str) -> Any:  # retrieve, get, set, release, isOpened
        return getattr(self._cap, name)


def guard_for(target: Target, *, name: str) -> StallGuard | None:
    """A stall guard for ``target`` when this OpenCV cannot time out its network reads."""
    if target.backend != "ffmpeg" or target.kind not in NETWORK_KINDS:
        return None
    if capture_features().timeouts:
        return None
    return StallGuard(target.open_string, name=name)
