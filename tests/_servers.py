"""Misbehaving network peers on loopback, for the video tests: a camera that accepts and
never answers, and an HTTP camera that freezes half-way through its stream; and the
waits those tests share."""

from __future__ import annotations

import contextlib
import http.server
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _media import clip, media_dir


class SilentServer:
    """Accepts TCP connections on 127.0.0.1 and never says a word (a hung camera)."""

    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(8)
        self.port = int(self._sock.getsockname()[1])
        self.held = []  # the sockets of the connections clients made
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="test-silent", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        self._sock.settimeout(0.1)
        while not self._stop.is_set():
            try:
                self.held.append(self._sock.accept()[0])
            except OSError:
                continue

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for conn in self.held:
            conn.close()
        self._sock.close()

    def __enter__(self) -> SilentServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def frozen_http_camera(tmp_path_factory: Any, tmp_path: Path) -> Iterator[str]:
    """An HTTP camera URL whose every GET sends half of a 3 s MPEG-TS clip, then freezes
    with the connection open (for 20 s at most)."""
    # 3 s, so the half that is sent outlasts FFmpeg's 1 s stream probe.
    longer = clip(media_dir(tmp_path_factory), size=(160, 120), fps=30, seconds=3.0)
    ts = tmp_path / "clip.ts"
    subprocess.run(["ffmpeg", "-loglevel", "error", "-i", str(longer), "-c", "copy", "-f",
                    "mpegts", str(ts)], check=True, timeout=30)  # fmt: skip
    payload = ts.read_bytes()
    stop = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "video/mp2t")
            self.end_headers()
            self.wfile.write(payload[: len(payload) // 2])
            self.wfile.flush()
            stop.wait(20)  # a camera that froze without closing the connection

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="test-http", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/cam"
    finally:
        stop.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


def wait_until(condition: Any, timeout_s: float) -> None:
    """Poll ``condition()`` every 50 ms until it holds or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)


def first_source_error(source: Any) -> tuple[Any, float]:
    """The SourceError a raising StreamLoader gives for ``source``, and how long it took."""
    import pytest

    from edgeload.errors import SourceError
    from edgeload.video import StreamLoader

    start = time.monotonic()
    # timeout_s far above any open timeout: a cause must come as a SourceError, not as
    # the loader's WorkerTimeout.
    loader = StreamLoader([source], size=(32, 32), on_error="raise", timeout_s=30)
    with loader, pytest.raises(SourceError) as info:
        for _ in loader:
            pass
    return info.value, time.monotonic() - start


@contextlib.contextmanager
def file_server(directory: Path) -> Iterator[str]:
    """An HTTP server on loopback serving the files in ``directory``; yields its base URL."""
    import functools

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="test-http-files", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
