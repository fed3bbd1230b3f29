"""Video sources: input checks at construction, backend and pipeline choice, the reader."""

from __future__ import annotations

import os
import threading
import time
from types import SimpleNamespace

import pytest
from _media import clip, media_dir
from _servers import frozen_http_camera

import edgeload
from edgeload.errors import SourceError
from edgeload.video import SourceState, StreamLoader, VideoSource

# Internal: the pipeline a board would get (gstreamer=, info=, elements= injected), the
# RTSP option precedence, and the reader alone (its one reused buffer, a raising sink,
# pacing against a slow sink, the loop position) where a loader's batching would hide it.
from edgeload.video._capture import (
    OPTIONS_VAR,
    THREADS_VAR,
    build_target,
    network_options,
    rtsp_transport_used,
    scoped_env,
)
from edgeload.video._gstreamer import StreamInfo, hardware_decoder
from edgeload.video._reader import StreamReader


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return clip(media_dir(tmp_path_factory), size=(160, 120), fps=30, seconds=1.0)


@pytest.mark.parametrize(
    ("uri", "match"),
    [
        ("/no/such/video.mp4", r"'/no/such/video.mp4' does not exist.*check the path"),
        ("ftp://cam.local/live", r"unknown scheme 'ftp'.*rtsp://"),
        ("gst:videotestsrc ! ! appsink", r"malformed.*gst-launch-1.0"),
        (
            "gst:videotestsrc ! videoconvert",
            r"must start with a source element and end in an appsink",
        ),
        ('gst:filesrc location="x ! appsink', r"malformed"),
        # without the prefix a pipeline is a file name like any other
        ("videotestsrc ! videoconvert ! appsink", r"does not exist"),
        ("csi://left", r"csi:// takes a sensor number"),
        (-1, r"camera index -1 is negative"),
        (3.5, r"expected a path, URL, camera index"),
    ],
)
def test_bad_sources_are_refused_at_construction(uri, match):
    with pytest.raises(SourceError, match=match) as info:
        VideoSource(uri)
    assert info.value.source == uri


@pytest.mark.parametrize(
    ("uri", "kind"),
    [
        ("rtsp://10.0.0.2:554/main", "rtsp"),
        ("https://example.com/live.m3u8", "http"),
        ("/dev/video2", "device"),
        (0, "device"),
        ("1", "device"),
        ("csi://0", "csi"),
        ("gst:videotestsrc ! videoconvert ! appsink", "pipeline"),
        ("rtsp://admin:pa!ss=w@10.0.0.2/main", "rtsp"),
    ],
)
def test_source_kinds(uri, kind):
    assert VideoSource(uri).kind == kind
    assert VideoSource(uri).live  # every kind but a plain file is a live input


ODD_NAMES = ["clip!1.mp4", 'a "quoted" name.mp4', "k=v ! fakesink name=x.mp4", "back\\slash.mp4"]


@pytest.mark.parametrize("name", ODD_NAMES)
def test_a_path_is_never_a_pipeline_and_its_value_is_quoted(small, tmp_path, name):
    import shutil

    path = tmp_path / name
    shutil.copy(small, path)
    source = VideoSource(str(path), backend="gstreamer")
    assert (source.kind, source.value) == ("file", str(path))
    target = build_target(
        "file", str(path), backend="gstreamer", preferred="gstreamer", decoder="software",
        gstreamer=True,
    )  # fmt: skip
    # The location is one quoted token, and no element beyond the ones edgeload wrote.
    escaped = str(path).replace("\\", "\\\\").replace('"', '\\"')
    assert f'location="{escaped}" ' in target.open_string
    rest = target.open_string.replace(f'"{escaped}"', "")
    assert "fakesink" not in rest and '"' not in rest


def test_file_defaults_and_options(small):
    assert VideoSource(small).policy == "every"
    assert not VideoSource(small).live
    replay = VideoSource(small, realtime=True, loop=True, fps=10)
    assert replay.live and replay.policy == "latest"
    with pytest.raises(ValueError, match="loop= and realtime= apply to files only"):
        VideoSource("rtsp://cam/x", loop=True)
    with pytest.raises(ValueError, match="fps must be > 0"):
        VideoSource(small, fps=0)
    with pytest.raises(ValueError, match="policy must be one of"):
        VideoSource(small, policy="fifo")


def test_backoff_is_jittered_exponential_and_capped():
    src = VideoSource("rtsp://cam/x", backoff_s=(0.5, 4.0))
    for attempt, ceiling in [(0, 0.5), (1, 1.0), (2, 2.0), (3, 4.0), (10, 4.0)]:
        delays = [src.backoff_delay(attempt) for _ in range(200)]
        assert ceiling / 2 <= min(delays) and max(delays) <= ceiling
        assert len(set(delays)) > 100  # jittered, so cameras do not retry in lockstep


@pytest.mark.parametrize(
    ("family", "soc", "decoder", "element"),
    [
        ("jetson", "tegra234", "jetson", "nvv4l2decoder enable-max-performance=1 ! nvvidconv"),
        ("raspberry_pi", "bcm2711", "rpi4", "v4l2h264dec"),
        ("raspberry_pi", "bcm2712", "rpi5", "avdec_h264"),  # a Pi 5 has no H.264 block
        ("x86", None, "software", "avdec_h264"),
    ],
)
def test_gstreamer_pipelines_per_board(family, soc, decoder, element):
    board = SimpleNamespace(family=family, soc=soc)
    assert hardware_decoder(board) == decoder
    rtsp = build_target(
        "rtsp", "rtsp://cam/x", backend="auto", preferred="gstreamer", decoder=decoder,
        gstreamer=True, info=StreamInfo(codec="h264"), elements=lambda name: True,
    )  # fmt: skip
    assert rtsp.backend == "gstreamer"
    assert rtsp.open_string.startswith('rtspsrc location="rtsp://cam/x" latency=0')
    assert element in rtsp.open_string
    assert rtsp.open_string.endswith("appsink drop=true max-buffers=1 sync=false")
    assert "protocols=tcp" in rtsp.open_string
    csi = build_target("csi", "0", backend="auto", preferred="ffmpeg", decoder=decoder,
                       gstreamer=True, pi_cameras=lambda: None, elements=lambda name: True)  # fmt: skip
    # A Pi's camera module is libcamera's; Argus is Jetson's (and x86 has no CSI of its own).
    pi = decoder in ("rpi4", "rpi5")
    assert ("libcamerasrc" if pi else "nvarguscamerasrc sensor-id=0") in csi.open_string


def test_ffmpeg_chosen_without_gstreamer_and_explicit_gstreamer_refused():
    target = build_target("rtsp", "rtsp://cam/x", backend="auto", preferred="gstreamer",
                          decoder="jetson", gstreamer=False)  # fmt: skip
    assert (target.backend, target.open_string) == ("ffmpeg", "rtsp://cam/x")
    with pytest.raises(SourceError, match=r"needs OpenCV with GStreamer.*JetPack"):
        build_target("rtsp", "rtsp://cam/x", backend="gstreamer", preferred="ffmpeg",
                     decoder="software", gstreamer=False)  # fmt: skip
    with pytest.raises(SourceError, match=r"needs OpenCV with GStreamer.*JetPack's OpenCV"):
        build_target("csi", "0", backend="auto", preferred="ffmpeg", decoder="jetson",
                     gstreamer=False)  # fmt: skip
    # A Pi camera with pip's OpenCV (a venv's usual one): what gives it GStreamer there.
    with pytest.raises(
        SourceError, match=r"python3-opencv gstreamer1.0-libcamera.*--system-site-packages"
    ):
        build_target("csi", "0", backend="auto", preferred="ffmpeg", decoder="rpi5",
                     gstreamer=False, picamera2=False)  # fmt: skip


def _run_reader(source, sink, **kwargs):
    """Read ``source`` into ``sink`` with FFmpeg in a reader thread, to its end."""
    target = build_target(source.kind, source.value, backend="ffmpeg", preferred="ffmpeg",
                          decoder="software")  # fmt: skip
    reader = StreamReader(source, target, stream_id=0, sink=sink, **kwargs)
    reader.start()
    assert reader.join(20)
    return reader


def _read_all(source, **kwargs):
    got = []

    def sink(frame, seq, pts_ms, captured_at):
        got.append((seq, frame.shape, frame.__array_interface__["data"][0]))
        return True

    return _run_reader(source, sink, **kwargs), got


def test_reader_decodes_every_frame_into_one_buffer(small):
    reader, got = _read_all(VideoSource(small))
    assert reader.connection.phase is SourceState.ENDED and reader.connection.last_error is None
    assert [seq for seq, _, _ in got] == list(range(30))
    assert {shape for _, shape, _ in got} == {(120, 160, 3)}
    assert len({addr for _, _, addr in got}) == 1  # cap.retrieve(image=buf) reuses it
    assert reader.thread.name == "edgeload-video-0"


def test_a_sink_that_raises_fails_a_file_stream_and_the_fault_keeps_the_exception(small):
    def rejecting_sink(frame, seq, pts_ms, captured_at):
        raise RuntimeError(f"the model refused frame {seq}")

    reader = _run_reader(VideoSource(small), rejecting_sink)
    fault = reader.connection.last_error
    assert reader.connection.phase is SourceState.FAILED  # a file does not retry
    assert isinstance(fault.exc, RuntimeError) and fault.type_name == "RuntimeError"
    assert fault.message == "RuntimeError: the model refused frame 0"
    assert "rejecting_sink" in fault.traceback_text


def test_reader_fps_limit_skips_without_decoding(small):
    with StreamLoader([VideoSource(small, fps=10)], size=(160, 120), batch=1) as loader:
        seqs = [batch.meta[0].seq for batch in loader]
        stream = loader.stats()["streams"][0]
    assert seqs == list(range(0, 30, 3))
    assert stream["skipped"] == 20


def test_reader_realtime_replay_is_paced_and_resumes_mid_file(small):
    start = time.monotonic()
    _, got = _read_all(VideoSource(small, realtime=True), start_frame=15)
    took = time.monotonic() - start
    assert [seq for seq, _, _ in got] == list(range(15, 30))
    assert 0.4 < took < 3.0  # 15 frames at 30 fps: about half a second, not instant


def test_a_realtime_replay_behind_its_schedule_skips_frames_as_late(small):
    def slow_sink(frame, seq, pts_ms, captured_at):
        time.sleep(0.1)  # three frame intervals at 30 fps
        return True

    reader = _run_reader(VideoSource(small, realtime=True), slow_sink)
    loop = reader.frame_loop
    assert reader.connection.phase is SourceState.ENDED
    # Every frame of the clip was grabbed once: delivered, or skipped to keep pace.
    assert loop.frames + loop.playhead.late == 30
    assert loop.playhead.late >= 10  # at most ~11 of 30 fit in the second it lasts


def test_a_looping_file_keeps_counting_while_its_position_wraps(small):
    got = []

    def sink(frame, seq, pts_ms, captured_at):
        got.append(seq)
        return len(got) < 45

    reader = _run_reader(VideoSource(small, loop=True), sink)
    assert got == list(range(45))
    assert reader.frame_loop.playhead.position == 15  # the 30-frame clip, once and a half
    assert reader.connection.phase is SourceState.CLOSED


def test_unreachable_stream_retries_with_backoff_and_stops_promptly():
    # A port nobody listens on: each open fails at once, so the retries show the backoff.
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    source = VideoSource(f"rtsp://127.0.0.1:{port}/x", backoff_s=(0.05, 0.2), open_timeout_s=1)
    loader = StreamLoader([source], size=(32, 32), deadline_ms=50, timeout_s=30)
    with loader:
        stats = loader.stats()["streams"][0]
        deadline = time.monotonic() + 30
        for _ in loader:  # empty batches at each deadline while the stream is down
            stats = loader.stats()["streams"][0]
            if stats["attempts"] >= 3 or time.monotonic() > deadline:
                break
        assert stats["state"] in (SourceState.RECONNECTING.value, SourceState.CONNECTING.value)
        assert stats["attempts"] >= 3
        assert "refused" in stats["last_error"]  # the cause, found first
        started = time.monotonic()
    assert time.monotonic() - started < 5  # close() stops the retries promptly
    assert not [t for t in threading.enumerate() if t.name.startswith("edgeload-video")]


def test_a_frozen_stream_times_out_and_reconnects(tmp_path_factory, tmp_path):
    with frozen_http_camera(tmp_path_factory, tmp_path) as url:
        source = VideoSource(url, read_timeout_s=1, open_timeout_s=3, backoff_s=(0.1, 0.2),
                             backend="ffmpeg")  # fmt: skip
        seqs = []
        with StreamLoader([source], size=(32, 32), deadline_ms=50, timeout_s=30) as loader:
            deadline = time.monotonic() + 15
            for batch in loader:
                seqs += [meta.seq for meta in batch.meta if meta is not None]
                stats = loader.stats()["streams"][0]
                if stats["reconnects"] >= 1 or time.monotonic() > deadline:
                    break
    assert stats["reconnects"] >= 1, stats["last_error"]
    assert "stopped delivering frames" in stats["last_error"]
    assert len(seqs) > 0 and seqs == sorted(seqs)  # seq keeps counting across the reconnect


def test_target_for_shows_what_a_loader_would_open():
    from edgeload.video import target_for

    target = target_for("rtsp://10.0.0.2/main")
    opencv = edgeload.probe().opencv
    if opencv is not None and opencv.gstreamer:
        assert target.backend in ("gstreamer", "ffmpeg")
    else:
        assert (target.backend, target.open_string) == ("ffmpeg", "rtsp://10.0.0.2/main")
        with pytest.raises(SourceError, match="needs OpenCV with GStreamer"):
            target_for(VideoSource("rtsp://10.0.0.2/main", backend="gstreamer"))


def test_rtsp_options_precedence_defaults_then_environment_then_source(monkeypatch):
    monkeypatch.delenv(OPTIONS_VAR, raising=False)
    assert rtsp_transport_used(None) == "tcp"
    monkeypatch.setenv(OPTIONS_VAR, "rtsp_transport;udp|stimeout;1000")
    assert rtsp_transport_used(None) == "udp"
    assert rtsp_transport_used("tcp") == "tcp"
    assert "stimeout;1000" in network_options("tcp")
    udp = build_target("rtsp", "rtsp://cam/x", backend="gstreamer", preferred="ffmpeg",
                       decoder="software", gstreamer=True, rtsp_transport="udp")  # fmt: skip
    assert "protocols=udp" in udp.open_string


def test_scoped_env_puts_back_what_was_there(monkeypatch):
    monkeypatch.setenv(OPTIONS_VAR, "mine")
    monkeypatch.delenv(THREADS_VAR, raising=False)
    with scoped_env({OPTIONS_VAR: "edgeload", THREADS_VAR: "2"}):
        assert os.environ[OPTIONS_VAR] == "edgeload"
    assert os.environ[OPTIONS_VAR] == "mine"
    assert THREADS_VAR not in os.environ
