"""Network sources beyond RTSP: rtmp://, udp://, srt:// through OpenCV's FFmpeg, and
recorded files (.mp4, .ts) over HTTP read to their end, every frame.

The HTTP files come from a real HTTP server on loopback; the UDP stream from a real
ffmpeg sending MPEG-TS to a loopback port.  test_gst.py reads the HTTP files through
the GStreamer path where OpenCV has GStreamer.
"""

from __future__ import annotations

import shutil
import socket
import subprocess

import numpy as np
import pytest
from _media import clip, ffmpeg_frames, media_dir
from _servers import file_server

from edgeload.errors import SourceError
from edgeload.video import StreamLoader, VideoSource

# Internal: build_target with gstreamer=True shows the choice on an OpenCV with GStreamer,
# which target_for() cannot where this OpenCV has none.
from edgeload.video._capture import build_target


@pytest.mark.parametrize(
    "url",
    ["rtmp://cam.local/live/a", "udp://127.0.0.1:5004", "srt://cam.local:9000", "rtmps://x/y"],
)
def test_stream_schemes_open_through_ffmpeg_not_refused(url):
    source = VideoSource(url)
    kind, value = source.kind, source.value
    assert kind == "stream"
    # Even where the plan prefers GStreamer, which has no pipeline for them here.
    target = build_target(kind, value, backend="auto", preferred="gstreamer",
                          decoder="software", gstreamer=True)  # fmt: skip
    assert (target.backend, target.open_string) == ("ffmpeg", url)
    assert source.network and source.live and source.policy == "latest"


def test_asking_gstreamer_for_a_stream_scheme_says_what_works():
    with pytest.raises(SourceError, match=r"udp://.*backend='auto'.*'gst:'"):
        build_target("stream", "udp://127.0.0.1:5004", backend="gstreamer",
                     preferred="gstreamer", decoder="software", gstreamer=True)  # fmt: skip


def http_file_frames(tmp_path_factory, suffix, backend):
    """Read a 1.5 s clip (45 frames) as ``suffix`` over HTTP; frames, stats, reference."""
    directory = tmp_path_factory.mktemp("served")
    source = clip(media_dir(tmp_path_factory), size=(160, 120), fps=30, seconds=1.5)
    path = directory / f"clip{suffix}"
    if suffix == ".mp4":
        shutil.copy(source, path)
    else:
        subprocess.run(["ffmpeg", "-loglevel", "error", "-i", str(source), "-c", "copy",
                        "-f", "mpegts", str(path)], check=True, timeout=30)  # fmt: skip
    with file_server(directory) as base:
        src = VideoSource(f"{base}/clip{suffix}", backend=backend)
        assert src.policy == "every"  # a recorded file: every frame, by default
        with StreamLoader([src], size=(160, 120)) as loader:
            frames = [b.frames[0].numpy().copy() for b in loader]
            stats = loader.stats()["streams"][0]
    return frames, stats, ffmpeg_frames(path)


@pytest.mark.parametrize("suffix", [".mp4", ".ts"])
def test_a_recorded_file_over_http_is_read_to_its_end(tmp_path_factory, suffix):
    frames, stats, reference = http_file_frames(tmp_path_factory, suffix, "ffmpeg")
    assert len(reference) == 45
    assert stats["state"] == "ended" and stats["reconnects"] == 0
    assert len(frames) == 45
    for got, want in zip(frames, reference):
        assert np.abs(got.astype(int) - want.astype(int)).mean() < 3


def _free_udp_port():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_udp_stream_delivers_frames(tmp_path_factory):
    port = _free_udp_port()
    # A camera sending MPEG-TS over UDP in real time, a key frame every 10 frames.
    sender = subprocess.Popen(
        ["ffmpeg", "-loglevel", "error", "-re", "-f", "lavfi", "-i",
         "testsrc2=size=160x120:rate=30", "-t", "60", "-c:v", "libx264", "-preset",
         "ultrafast", "-tune", "zerolatency", "-g", "10", "-pix_fmt", "yuv420p",
         "-f", "mpegts", f"udp://127.0.0.1:{port}?pkt_size=1316"],
    )  # fmt: skip
    try:
        src = VideoSource(f"udp://127.0.0.1:{port}", open_timeout_s=10, read_timeout_s=10)
        with StreamLoader([src], size=(160, 120), deadline_ms=20000) as loader:
            got = 0
            for batch in loader:
                got += sum(1 for m in batch.meta if m is not None)
                if got >= 5:
                    break
            stats = loader.stats()["streams"][0]
    finally:
        sender.kill()
        sender.wait(10)
    assert got >= 5
    assert stats["backend"] == "ffmpeg" and stats["pipeline"] == f"udp://127.0.0.1:{port}"
