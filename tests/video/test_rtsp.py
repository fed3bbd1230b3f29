"""A real RTSP server on loopback: a stream that drops and comes back reconnects alone."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import clock_camera
import numpy as np
import psutil
import pytest
from _media import clip, media_dir
from _require import RTSP_SERVER_PROBE, missing, system_python_has

from edgeload.video import StreamLoader, VideoSource

SERVER = Path(__file__).resolve().parents[1] / "rtsp_server.py"
SYSTEM_PYTHON = "/usr/bin/python3"

pytestmark = pytest.mark.rtsp


class RtspServer:
    """``tests/rtsp_server.py`` in a subprocess, started and stopped by the test."""

    def __init__(self, port: int, codec: str = "h264") -> None:
        self.port = port
        self.codec = codec
        self.proc: subprocess.Popen[str] | None = None

    def start(self, media: Path) -> str:
        self.proc = subprocess.Popen(
            [SYSTEM_PYTHON, str(SERVER), "--port", str(self.port), "--file", str(media),
             "--codec", self.codec],
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
                # On a loaded box the first connection can open before the camera sends,
                # time out and reopen: that reconnect is not the restart's.
                reconnects_before = loader.stats()["streams"][0]["reconnects"]
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
    assert cam_stats["reconnects"] == reconnects_before + 1 and cam_stats["state"] == "streaming"
    assert file_stats["reconnects"] == 0
    # 33 ms expected at 30 fps; a stall behind the camera would last its reconnect (> 1.5 s)
    assert max(np.diff(file_times)) < 1.0


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


CLOCK_CAMERA = Path(__file__).resolve().parents[1] / "clock_camera.py"


class ClockCamera(RtspServer):
    """``tests/clock_camera.py``: a live camera that draws its capture time in each frame."""

    def start(self, media: Path | None = None) -> str:  # same call as RtspServer.start
        self.proc = subprocess.Popen(
            [SYSTEM_PYTHON, str(CLOCK_CAMERA), "--port", str(self.port), "--size", "320x240"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line.startswith("READY"):
            self.stop()
            pytest.fail(f"clock camera did not start: {line!r}")
        return line.split()[1]


@pytest.fixture
def camera():
    if not system_python_has(RTSP_SERVER_PROBE + CLOCK_PROBE):
        missing("RTSP", "needs gst-rtsp-server, x264enc and numpy for /usr/bin/python3")
    cam = ClockCamera(free_port())
    yield cam
    cam.stop()


CLOCK_PROBE = (
    "; import numpy; gi.require_version('Gst', '1.0'); from gi.repository import Gst; "
    "Gst.init(None); assert Gst.ElementFactory.find('x264enc')"
)


def test_first_frames_after_a_restart_are_live_not_the_reopen_backlog(camera):
    url = camera.start()
    src = VideoSource(url, open_timeout_s=5, read_timeout_s=1, backoff_s=(0.2, 0.5))
    restarted = threading.Event()
    fresh: list[tuple[float, float]] = []  # (true age, reported age) after the restart
    give_up_at, reconnects_before = float("inf"), 0
    with StreamLoader([src], size=(160, 160), timeout_s=20) as loader:
        for i, batch in enumerate(loader):
            if i == 10:
                # Counted here, not assumed 0: on a loaded box the first connection can
                # open before the camera sends and time out, and its reopen counts too.
                reconnects_before = loader.stats()["streams"][0]["reconnects"]
                camera.stop()
                threading.Timer(1.0, lambda: (camera.start(), restarted.set())).start()
                give_up_at = time.monotonic() + 30  # the restart takes 1-3 s
            stream = loader.stats()["streams"][0]
            reopened = stream["reconnects"] > reconnects_before
            if restarted.is_set() and reopened and batch.valid[0]:
                true = clock_camera.age_ms(batch.frames.numpy()[0])
                assert true is not None, "the capture time drawn in the frame did not read back"
                fresh.append((true, batch.meta[0].age_ms))
                if len(fresh) == 5:
                    break
            if time.monotonic() > give_up_at:
                break
        stream = loader.stats()["streams"][0]
    assert len(fresh) == 5, f"{len(fresh)} frames in the 30 s after the restart; {stream}"
    # An FFmpeg reopen buffers about 1 s of frames while it probes; those are dropped
    # unconverted, so what ships after a restart is live (tens of ms on loopback).
    assert max(true for true, _ in fresh) < 500, fresh
    assert stream["backlog"] > 0 and stream["age_from"] == "pts"
    # The PTS-anchored age never claims a frame is older than it is.
    assert all(reported <= true + 5 for true, reported in fresh), fresh
