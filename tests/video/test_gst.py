"""The GStreamer path, with an OpenCV that has GStreamer (Debian's python3-opencv).

``scripts/test.sh`` runs this file in nox's ``bookworm`` session (the system Python, so its cv2 4.6
with GStreamer) using the software decoder ``avdec_h264`` where a Jetson would use
``nvv4l2decoder``.  In a venv whose OpenCV lacks GStreamer it skips while Debian's
OpenCV has it (that run covers it); when neither has it, ``EDGELOAD_REQUIRE_GSTREAMER=1``
or ``CI`` makes that a failure (tests/_require.py).
"""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
from _media import clip, ffmpeg_frames, media_dir

from edgeload.video import StreamLoader, VideoSource

pytestmark = pytest.mark.gstreamer


def test_file_decodes_through_a_gstreamer_pipeline(tmp_path_factory):
    import cv2

    path = clip(media_dir(tmp_path_factory), size=(160, 120), fps=30, seconds=1.0)
    with StreamLoader([VideoSource(path, backend="gstreamer")], size=(160, 120)) as loader:
        frames = [b.frames[0].numpy().copy() for b in loader]
        stats = loader.stats()["streams"][0]
        threads = loader.plan.threads.ffmpeg
    assert stats["backend"] == "gstreamer" and stats["state"] == "ended"
    assert stats["pipeline"].startswith(f'filesrc location="{path}" ! qtdemux ! h264parse')
    assert f"avdec_h264 max-threads={threads} !" in stats["pipeline"]  # the plan's count
    assert len(frames) == 30
    cap = cv2.VideoCapture(str(path), cv2.CAP_FFMPEG)
    ok, reference = cap.read()
    cap.release()
    assert ok
    # Two decoders and colour converters: equal up to rounding.
    assert np.abs(frames[0].astype(int) - reference.astype(int)).mean() < 3


@pytest.mark.parametrize("name", ["clip!1.mp4", 'a "quoted" name.mp4', "k=v ! fakesink.mp4"])
def test_a_file_name_with_pipeline_characters_opens_as_that_file(tmp_path_factory, name):
    import shutil

    path = tmp_path_factory.mktemp("odd") / name
    shutil.copy(clip(media_dir(tmp_path_factory), size=(160, 120), fps=30, seconds=1.0), path)
    with StreamLoader([VideoSource(path, backend="gstreamer")], size=(160, 120)) as loader:
        frames = sum(1 for _ in loader)
        stats = loader.stats()["streams"][0]
    assert stats["backend"] == "gstreamer" and stats["state"] == "ended"
    assert frames == 30


def test_raw_pipeline_is_a_live_source():
    pipeline = (
        "videotestsrc is-live=true pattern=ball ! video/x-raw,width=320,height=240,"
        "framerate=30/1 ! videoconvert ! video/x-raw,format=BGR ! "
        "appsink drop=true max-buffers=1 sync=false"
    )
    source = VideoSource("gst:" + pipeline)
    assert source.live and source.policy == "latest"
    with StreamLoader([source], size=(64, 64), layout="NCHW", color="rgb") as loader:
        batches = list(itertools.islice(loader, 10))
        stats = loader.stats()["streams"][0]
    assert stats["pipeline"] == pipeline and stats["state"] == "streaming"
    assert all(tuple(b.frames.shape) == (1, 3, 64, 64) for b in batches)
    seqs = [b.meta[0].seq for b in batches]
    assert seqs == sorted(seqs) and len(set(seqs)) == 10


@pytest.mark.rtsp
def test_rtsp_through_rtspsrc_and_the_decoder_chain(tmp_path_factory):
    from test_rtsp import RtspServer, free_port

    server = RtspServer(free_port())
    try:
        url = server.start(clip(media_dir(tmp_path_factory), size=(160, 120), seconds=2.0))
        source = VideoSource(url, backend="gstreamer")
        with StreamLoader([source], size=(80, 60)) as loader:
            batches = list(itertools.islice(loader, 10))
            stats = loader.stats()["streams"][0]
    finally:
        server.stop()
    assert stats["pipeline"].startswith(f'rtspsrc location="{url}" latency=0 protocols=tcp ! ')
    assert "avdec_h264" in stats["pipeline"] and stats["pipeline"].endswith("sync=false")
    assert all(tuple(b.frames.shape) == (1, 60, 80, 3) and bool(b.valid[0]) for b in batches)


ENCODERS = {
    "h264": ["-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p"],
    "h265": ["-c:v", "libx265", "-preset", "ultrafast", "-pix_fmt", "yuv420p",
             "-x265-params", "log-level=error"],
    "mjpeg": ["-c:v", "mjpeg", "-q:v", "3", "-pix_fmt", "yuvj420p"],
}  # fmt: skip


def encoded(directory, codec: str, container: str, frames: int = 12):
    """A 160x120 clip of ``frames`` frames in ``codec`` and ``container``, made by ffmpeg."""
    import subprocess

    path = directory / f"{codec}.{container}"
    if not path.exists():
        subprocess.run(
            ["ffmpeg", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
             "testsrc2=size=160x120:rate=30", "-frames:v", str(frames), *ENCODERS[codec],
             "-g", "6", str(path)],
            check=True, timeout=120,
        )  # fmt: skip
    return path


@pytest.mark.parametrize(
    ("codec", "container"),
    [
        ("h264", "mp4"), ("h264", "mkv"), ("h264", "ts"), ("h264", "avi"),
        ("h265", "mp4"), ("h265", "mkv"), ("h265", "ts"),
        ("mjpeg", "avi"), ("mjpeg", "mkv"), ("mjpeg", "mov"),
    ],
)  # fmt: skip
def test_each_codec_and_container_delivers_its_frames(tmp_path_factory, codec, container):
    path = encoded(media_dir(tmp_path_factory), codec, container)
    reference = ffmpeg_frames(path)
    with StreamLoader([VideoSource(path, backend="gstreamer")], size=(160, 120)) as loader:
        frames = [b.frames[0].numpy().copy() for b in loader]
        stats = loader.stats()["streams"][0]
    assert stats["state"] == "ended", stats
    decoder = {"h264": "avdec_h264", "h265": "avdec_h265", "mjpeg": "jpegdec"}[codec]
    assert re.search(rf" ! {decoder}( max-threads=\d+)? ! ", stats["pipeline"])
    assert "format=I420" in stats["pipeline"]
    assert len(frames) == len(reference) == 12
    for ours, theirs in zip(frames, reference):
        # Two decoders and colour converters: equal up to rounding.
        assert np.abs(ours.astype(int) - theirs.astype(int)).mean() < 4


@pytest.mark.parametrize("resize", ["stretch", "letterbox"])
def test_scaled_by_the_writer_as_the_ffmpeg_path_scales(tmp_path_factory, resize):
    path = clip(media_dir(tmp_path_factory), size=(320, 240), fps=30, seconds=0.5)
    out = {}
    for backend in ("gstreamer", "ffmpeg"):
        source = VideoSource(path, backend=backend)
        with StreamLoader([source], size=(96, 96), resize=resize, color="rgb") as loader:
            out[backend] = [b.frames[0].numpy().astype(int) for b in loader]
            if backend == "gstreamer":
                pipeline = loader.stats()["streams"][0]["pipeline"]
    # Decoded at full size; the frame writer scales the planes (no videoscale).
    assert "videoscale" not in pipeline and "videoconvert ! video/x-raw,format=I420 !" in pipeline
    assert len(out["gstreamer"]) == len(out["ffmpeg"]) == 15
    for ours, theirs in zip(out["gstreamer"], out["ffmpeg"]):
        assert np.abs(ours - theirs).mean() < 8  # two scalers: close, not equal


@pytest.mark.rtsp
@pytest.mark.parametrize(
    ("codec", "chain"),
    [("h265", "rtph265depay ! h265parse ! avdec_h265"),
     ("mjpeg", "rtpjpegdepay ! jpegparse ! jpegdec")],  # an MJPEG IP camera
)  # fmt: skip
def test_h265_and_mjpeg_rtsp_through_their_depayloaders(tmp_path_factory, codec, chain):
    from test_rtsp import RtspServer, free_port

    path = encoded(media_dir(tmp_path_factory), "h265", "mp4", frames=60)
    server = RtspServer(free_port(), codec=codec)
    try:
        url = server.start(path)
        source = VideoSource(url, backend="gstreamer")
        with StreamLoader([source], size=(80, 60)) as loader:
            batches = list(itertools.islice(loader, 10))
            stats = loader.stats()["streams"][0]
    finally:
        server.stop()
    # The codec's own chain where discovery named the codec at open; Debian trixie's
    # GStreamer 1.26 once could not tell it within the open timeout, and decodebin, the
    # fallback, then chose the decoder by rank: the frames arrive either way.
    assert chain in stats["pipeline"] or " ! decodebin ! " in stats["pipeline"], stats
    assert all(tuple(b.frames.shape) == (1, 60, 80, 3) and bool(b.valid[0]) for b in batches)


@pytest.mark.parametrize("resize", ["stretch", "letterbox"])
def test_boxes_map_back_to_the_camera_when_the_writer_scaled_the_planes(tmp_path_factory, resize):
    """The pipeline hands over YUV as decoded and the writer scales its planes; each
    frame's geometry is the decoded picture's, so a box found in the batch maps to
    camera pixels."""
    from _media import square_clip

    square = (400, 120, 560, 280)
    path = square_clip(media_dir(tmp_path_factory), size=(1280, 720), square=square)
    src = VideoSource(path, backend="gstreamer")
    with StreamLoader([src], size=(320, 320), batch=1, resize=resize) as loader:
        batch = next(iter(loader))
        assert "videoscale" not in loader.stats()["streams"][0]["pipeline"]
    meta = batch.meta[0]
    assert meta.source_size == (1280, 720)
    frame = batch.frames[0].numpy()
    ys, xs = np.nonzero(frame[..., 0] > 128)
    found = np.array([[xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]], np.float32)
    assert np.abs(meta.to_source(found)[0] - np.array(square)).max() <= 6


@pytest.mark.parametrize("suffix", [".mp4", ".ts"])
def test_a_recorded_file_over_http_is_read_to_its_end_through_gstreamer(tmp_path_factory, suffix):
    from test_network_sources import http_file_frames

    frames, stats, reference = http_file_frames(tmp_path_factory, suffix, "gstreamer")
    assert stats["backend"] == "gstreamer" and stats["state"] == "ended"
    assert "is-live" not in stats["pipeline"] and "appsink max-buffers=2" in stats["pipeline"]
    assert len(frames) == len(reference) == 45
    for got, want in zip(frames, reference):
        assert np.abs(got.astype(int) - want.astype(int)).mean() < 3
