"""OpenCV features found at run time, and the stall guard that stands in for the timeouts.

On an OpenCV without the FFmpeg open/read timeouts (before 4.5.4, e.g. Debian bullseye's
4.5.1 in the nox arm64 session) the guard is what frees a reader from a silent camera.
Here, on a newer OpenCV, ``EDGELOAD_STALL_GUARD=1`` makes edgeload open captures exactly
as it does there (no timeout properties) so the same tests exercise the guard.
"""

from __future__ import annotations

import socket
import threading
import time
from types import SimpleNamespace

import cv2
import pytest
from _servers import SilentServer, frozen_http_camera, wait_until

from edgeload.video import VideoSource

# Internal: an OpenCV without the timeouts is simulated here (features_of a stand-in cv2),
# and the stall guard is driven on one reader against a silent server.
from edgeload.video._capture import (
    STALL_GUARD_VAR,
    build_target,
    capture_fallbacks,
    capture_features,
    cut_connections,
    features_of,
    parse_version,
    remote_addresses,
)
from edgeload.video._reader import StreamReader


def test_versions_parse_with_suffixes():
    assert parse_version("4.5.1") == (4, 5, 1)
    assert parse_version("4.10.0-dev") == (4, 10, 0)
    assert parse_version("5") == (5, 0, 0)


def test_features_follow_the_version_and_constants():
    old = SimpleNamespace(__version__="4.5.1", CAP_PROP_OPEN_TIMEOUT_MSEC=53)
    f = features_of(old)
    assert (f.params, f.timeouts, f.n_threads) == (False, False, False)
    assert len(capture_fallbacks(f)) == 3
    jetpack5 = SimpleNamespace(
        __version__="4.5.4", CAP_PROP_OPEN_TIMEOUT_MSEC=53, CAP_PROP_READ_TIMEOUT_MSEC=54
    )
    f = features_of(jetpack5)
    assert (f.params, f.timeouts, f.n_threads) == (True, True, False)
    assert [lack for lack, _ in capture_fallbacks(f)] == [
        "OpenCV has no FFmpeg decode thread cap (CAP_PROP_N_THREADS, 4.7+)"
    ]


def test_the_installed_opencv_is_read_and_the_guard_switch_drops_the_timeouts(monkeypatch):
    monkeypatch.delenv(STALL_GUARD_VAR, raising=False)
    real = capture_features()
    assert real.version == parse_version(cv2.__version__)
    assert real.params == (real.version >= (4, 5, 2))
    assert real.timeouts == (real.params and hasattr(cv2, "CAP_PROP_READ_TIMEOUT_MSEC"))
    monkeypatch.setenv(STALL_GUARD_VAR, "1")
    assert not capture_features().timeouts
    assert any("stall guard" in instead for _, instead in capture_fallbacks())


def test_remote_addresses_use_the_scheme_default_port():
    assert remote_addresses("rtsp://127.0.0.1/x") == {("127.0.0.1", 554)}
    assert remote_addresses("http://127.0.0.1:8080/cam") == {("127.0.0.1", 8080)}
    assert remote_addresses("http://no-such-host.invalid/cam") == set()


def test_cut_connections_ends_a_blocked_recv():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port), timeout=30)
        peer, _ = server.accept()
        got = []
        reader = threading.Thread(target=lambda: got.append(client.recv(10)), name="test-recv")
        reader.start()
        time.sleep(0.2)
        assert cut_connections({("127.0.0.1", port)}) == 1
        reader.join(10)
        assert not reader.is_alive() and got == [b""]  # the blocked recv saw the end
        client.close()
        peer.close()


@pytest.mark.parametrize("scheme", ["rtsp", "http"])
def test_the_guard_frees_a_reader_stuck_opening_a_silent_camera(monkeypatch, scheme):
    monkeypatch.setenv(STALL_GUARD_VAR, "1")
    with SilentServer() as camera:
        url = f"{scheme}://127.0.0.1:{camera.port}/cam"
        source = VideoSource(url, open_timeout_s=1, read_timeout_s=1, backoff_s=(0.1, 0.2))
        target = build_target(scheme, url, backend="ffmpeg", preferred="ffmpeg",
                              decoder="software")  # fmt: skip
        reader = StreamReader(source, target, stream_id=11, sink=lambda f, *info: True)
        reader.start()
        wait_until(lambda: reader.connection.attempts >= 2, 20)
        attempts = reader.connection.attempts
        stopped_at = time.monotonic()
        reader.stop()
        assert reader.join(10)
        took = time.monotonic() - stopped_at
    # each open gave up after about open_timeout_s (OpenCV's own limit is 30 s)
    assert attempts >= 2, reader.connection.last_error
    assert took < 5, took  # stop() cut the open in progress
    if scheme == "rtsp":
        # RTSP's preflight DESCRIBE finds the silent camera before OpenCV opens it
        assert "no RTSP answer" in reader.connection.last_error.message
    else:
        assert reader._guard is not None and reader._guard.cuts >= 1


def test_the_guard_reconnects_a_frozen_http_stream(monkeypatch, tmp_path_factory, tmp_path):
    monkeypatch.setenv(STALL_GUARD_VAR, "1")
    with frozen_http_camera(tmp_path_factory, tmp_path) as url:
        source = VideoSource(url, read_timeout_s=1, open_timeout_s=3, backoff_s=(0.1, 0.2))
        target = build_target("http", url, backend="ffmpeg", preferred="ffmpeg",
                              decoder="software")  # fmt: skip
        seqs = []
        reader = StreamReader(source, target, stream_id=12,
                              sink=lambda f, seq, *_: seqs.append(seq) or True)  # fmt: skip
        reader.start()
        wait_until(lambda: reader.connection.reconnects >= 1, 20)
        reader.stop()
        assert reader.join(10)
    assert reader.connection.reconnects >= 1, reader.connection.last_error
    assert reader._guard.cuts >= 1
    assert len(seqs) > 0 and seqs == sorted(seqs)
