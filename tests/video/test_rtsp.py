"""A real RTSP server on loopback: a stream that drops and comes back reconnects alone."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
from _media import clip, media_dir
from _require import RTSP_SERVER_PROBE, missing, system_python_has

from edgeload.video import StreamLoader, VideoSource

SERVER = Path(__file__).resolve().parents[1] / "rtsp_server.py"
SYSTEM_PYTHON = "/usr/bin/python3"

pytestmark = pytest.mark.rtsp


def server_available() -> bool:
    return system_python_has(RTSP_SERVER_PROBE)


class RtspServer:
    """``tests/rtsp_server.py`` in a subprocess, started and stopped by the test."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.proc: subprocess.Popen[str] | None = None

    def start(self, media: Path) -> str:
        self.proc = subprocess.Popen(
            [SYSTEM_PYTHON, str(SERVER), "--port", str(self.port), "--file", str(media)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        line = ""
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not line.startswith("READY"):
            line = self.proc.stdout.readline() if self.proc.stdout else ""
            if not line and self.proc.poll() is not None:
                break
        if not line.startswith("READY"):
            self.stop()
            pytest.fail(f"RTSP server did not start: {line!r}")
        return line.split()[1]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.proc is not None and self.proc.stdout:
            self.proc.stdout.close()
        self.proc = None


def free_port() -> int:
    """A TCP port free on loopback right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def server():
    if not server_available():
        missing(
            "RTSP", "needs Debian's gst-rtsp-server for /usr/bin/python3 (scripts/_system_deps.sh)"
        )
    srv = RtspServer(free_port())
    yield srv
    srv.stop()


def test_stream_reconnects_after_server_restart_and_others_never_stop(server, tmp_path_factory):
    root = media_dir(tmp_path_factory)
    before = clip(root, size=(160, 120), fps=30, seconds=2.0)
    after = clip(root, size=(320, 240), fps=30, seconds=2.0)  # the camera comes back bigger
    url = server.start(before)
    cam = VideoSource(url, open_timeout_s=3, read_timeout_s=1, backoff_s=(0.2, 0.5))
    replay = VideoSource(before, realtime=True, loop=True)
    file_times: list[float] = []
    cam_before = cam_after = 0
    with StreamLoader([cam, replay], size=(64, 48), deadline_ms=100) as loader:
        start = time.monotonic()
        phase = "before"
        for batch in loader:
            now = time.monotonic()
            assert tuple(batch.frames.shape) == (2, 48, 64, 3)
            if batch.valid[1]:
                file_times.append(now)
            if batch.valid[0]:
                if phase == "before":
                    cam_before += 1
                elif phase == "restarted":
                    cam_after += 1
            if phase == "before" and cam_before >= 15:
                server.stop()
                phase, stopped_at = "down", now
            elif phase == "down" and now - stopped_at > 1.5:
                stats_down = loader.stats()["streams"][0]
                threading.Thread(target=server.start, args=(after,), daemon=True).start()
                phase = "restarted"
            elif phase == "restarted" and cam_after >= 15:
                break
            assert now - start < 40, f"stuck in phase {phase}: {loader.stats()['streams'][0]}"
        stats = loader.stats()
    assert stats_down["state"] == "reconnecting"
    assert stats_down["last_error"]
    cam_stats, file_stats = stats["streams"]
    assert cam_stats["reconnects"] == 1 and cam_stats["state"] == "streaming"
    assert file_stats["reconnects"] == 0
    assert max(np.diff(file_times)) < 0.5  # never stalled


def _sockets() -> tuple[int, int]:
    """This process's (UDP sockets, TCP connections to a server) right now."""
    me = psutil.Process()
    conns = me.net_connections if hasattr(me, "net_connections") else me.connections
    return len(conns(kind="udp")), len([c for c in conns(kind="tcp") if c.raddr])


def _transport_while_streaming(loader: StreamLoader) -> tuple[int, int]:
    for i, batch in enumerate(loader):
        if batch.valid.all() and i >= 3:
            return _sockets()
    raise AssertionError("the stream ended before it delivered frames")


def test_rtsp_runs_over_tcp_and_leaves_the_environment_alone(server, tmp_path_factory):
    url = server.start(clip(media_dir(tmp_path_factory), size=(160, 120), fps=30, seconds=2.0))
    before = os.environ.get("OPENCV_FFMPEG_CAPTURE_OPTIONS")
    assert _sockets()[0] == 0, "another test left UDP sockets open"
    with StreamLoader([VideoSource(url, open_timeout_s=5)], size=(64, 48)) as loader:
        udp, tcp = _transport_while_streaming(loader)
        assert loader.stats()["streams"][0]["rtsp_transport"] == "tcp"
    assert (udp, tcp) == (0, 1), "RTP should be interleaved in the one RTSP TCP connection"
    assert os.environ.get("OPENCV_FFMPEG_CAPTURE_OPTIONS") == before
    # A capture the user opens afterwards still gets OpenCV's own TCP preference.
    cv2 = pytest.importorskip("cv2")
    cap = cv2.VideoCapture(url, cv2.CAP_FFMPEG)
    try:
        assert cap.read()[0]
        assert _sockets() == (0, 1)
    finally:
        cap.release()


def test_rtsp_over_udp_on_request(server, tmp_path_factory):
    url = server.start(clip(media_dir(tmp_path_factory), size=(160, 120), fps=30, seconds=2.0))
    cam = VideoSource(url, open_timeout_s=5, rtsp_transport="udp")
    with StreamLoader([cam], size=(64, 48)) as loader:
        udp, _ = _transport_while_streaming(loader)
        assert loader.stats()["streams"][0]["rtsp_transport"] == "udp"
    assert udp >= 2, "RTP and RTCP should arrive on UDP sockets"


def test_rtsp_transport_is_checked():
    with pytest.raises(ValueError, match=r"rtsp_transport.*'quic'"):
        VideoSource("rtsp://cam/x", rtsp_transport="quic")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rtsp:// sources only"):
        VideoSource(0, rtsp_transport="udp")
