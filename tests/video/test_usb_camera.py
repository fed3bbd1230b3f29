"""USB cameras: the mode closest to a request, chosen from real cameras' mode lists
(tests/fixtures/v4l2/, sources in its README), the pipelines that ask for it, and
the argument checks.  No /dev/video* exists here: what needs one is tested as text."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from edgeload.errors import ArgumentError, SourceError
from edgeload.video import StreamLoader, VideoSource

# Internal: a camera's v4l2-ctl mode list is injected (modes=) and parsed from captured text.
from edgeload.video._capture import build_target
from edgeload.video._gstreamer import Output
from edgeload.video._v4l2 import (
    CameraMode,
    CameraRequest,
    choose_mode,
    fourcc_text,
    framerate,
    parse_modes,
)

V4L2 = Path(__file__).resolve().parents[1] / "fixtures" / "v4l2"


def modes(name: str) -> list[CameraMode]:
    return parse_modes((V4L2 / f"{name}.txt").read_text(encoding="utf-8"))


def test_parser_reads_both_layouts_of_v4l2_ctl():
    old = modes("mjpg-streamer-169")  # Index : / Pixel Format: layout
    assert {m.fourcc for m in old} == {"YUYV", "MJPG"}
    assert CameraMode("YUYV", 1280, 720, 10.0) in old
    assert CameraMode("MJPG", 1920, 1080, 30.0) in old
    assert CameraMode("YUYV", 640, 480, 7.5) in old
    assert len(old) == 15 + 17
    new = modes("cameractrls-30")  # [0]: 'MJPG' layout
    assert len(new) == 7 + 7 + 3 and {m.fourcc for m in new} == {"MJPG"}
    tabs = modes("prusa-connect-camera-script-3")
    assert len(tabs) == 4 * 6 + 5 and CameraMode("YUYV", 352, 288, 30.0) in tabs


@pytest.mark.parametrize(
    ("camera", "request_", "chosen"),
    [
        # raw reaches only 10 fps at 720p: MJPG
        ("mjpg-streamer-169", ((1280, 720), 30, None), ("MJPG", 1280, 720, 30)),
        # raw reaches the rate: raw, no decode
        ("mjpg-streamer-169", ((640, 480), 30, None), ("YUYV", 640, 480, 30)),
        ("mjpg-streamer-169", ((1280, 720), 10, None), ("YUYV", 1280, 720, 10)),
        # no rate asked: the highest at that size
        ("mjpg-streamer-169", ((1280, 720), None, None), ("MJPG", 1280, 720, 30)),
        ("mjpg-streamer-169", ((1920, 1080), 30, None), ("MJPG", 1920, 1080, 30)),
        # raw asked at a size it does not have: the nearest raw size
        ("mjpg-streamer-169", ((1920, 1080), 30, "YUYV"), ("YUYV", 1280, 720, 10)),
        ("mjpg-streamer-169", ((1920, 1080), 15, "MJPG"), ("MJPG", 1920, 1080, 30)),
        ("cameractrls-30", ((1000, 700), 25, None), ("MJPG", 1280, 720, 30)),
        ("cameractrls-30", ((320, 240), 7.5, "MJPG"), ("MJPG", 320, 240, 30)),
        ("prusa-connect-camera-script-3", ((352, 288), 30, None), ("YUYV", 352, 288, 30)),
        ("prusa-connect-camera-script-3", ((1920, 1080), 30, None), ("YUYV", 640, 480, 30)),
    ],
)
def test_the_mode_closest_to_the_request(camera, request_, chosen):
    assert choose_mode(modes(camera), CameraRequest(*request_)) == CameraMode(*chosen)


def test_no_mode_of_the_asked_format_is_none():
    assert choose_mode(modes("cameractrls-30"), CameraRequest((640, 480), 30, "YUYV")) is None


def _target(board, request, listed, backend="gstreamer"):
    return build_target(
        "device", "/dev/video0", backend=backend, preferred="gstreamer", decoder=board,
        gstreamer=True, elements=lambda name: True, camera=request, modes=listed,
        output=Output(size=(640, 640)),
    )  # fmt: skip


def test_mjpeg_camera_pipeline_decodes_and_scales_once():
    target = _target("software", CameraRequest((1920, 1080), 30, None), modes("mjpg-streamer-169"))
    assert target.open_string == (
        'v4l2src device="/dev/video0" ! image/jpeg,width=1920,height=1080,framerate=30/1 '
        "! jpegdec ! videoscale ! videoconvert ! video/x-raw,format=I420,width=640,height=640 "
        "! appsink drop=true max-buffers=1 sync=false"
    )
    assert target.yuv == "I420" and target.source_size == (1920, 1080)
    assert target.camera_mode == CameraMode("MJPG", 1920, 1080, 30.0)


def test_mjpeg_camera_on_a_jetson_uses_nvv4l2decoder():
    target = _target("jetson", CameraRequest((1280, 720), 30, "MJPG"), modes("mjpg-streamer-169"))
    assert (
        "image/jpeg,width=1280,height=720,framerate=30/1 ! jpegparse ! nvv4l2decoder mjpeg=1 "
        "! nvvidconv ! video/x-raw,format=NV12,width=640,height=640" in target.open_string
    )
    assert target.yuv == "NV12"


def test_raw_camera_pipeline_and_fractional_rate():
    target = _target("software", CameraRequest((640, 480), 7.5, "YUYV"), [])
    assert "v4l2src device=\"/dev/video0\" ! video/x-raw,format=YUY2,width=640,height=480," \
        "framerate=15/2 ! videoscale" in target.open_string  # fmt: skip
    assert framerate(30000 / 1001) == "30000/1001"


def test_unlisted_modes_pass_the_request_as_asked():
    target = _target("software", CameraRequest((1280, 720), 30, None), [])
    assert target.camera_mode == CameraMode("", 1280, 720, 30.0)
    assert (
        '! "video/x-raw,width=1280,height=720,framerate=30/1;'
        'image/jpeg,width=1280,height=720,framerate=30/1" ! decodebin !' in target.open_string
    )


def test_a_format_the_camera_lacks_is_a_source_error_naming_its_formats():
    with pytest.raises(SourceError, match=r"no YUYV mode \(its formats: MJPG\)"):
        _target("software", CameraRequest((640, 480), 30, "YUYV"), modes("cameractrls-30"))


def test_ffmpeg_v4l2_backend_opens_by_index_with_the_mode():
    target = _target("software", CameraRequest((1280, 720), 30, None),
                     modes("mjpg-streamer-169"), backend="ffmpeg")  # fmt: skip
    assert target.backend == "any" and target.index == 0
    assert target.camera_mode == CameraMode("MJPG", 1280, 720, 30.0)
    assert fourcc_text(0x47504A4D) == "MJPG" and fourcc_text(0) == ""


def test_camera_arguments_are_checked():
    src = VideoSource(0, resolution=(1280, 720), fps=30, fourcc="mjpg")
    assert src.camera == CameraRequest((1280, 720), 30.0, "MJPG")
    assert VideoSource("/dev/video3", fps=5).camera is None  # fps alone limits delivery
    with pytest.raises(ArgumentError, match="resolution"):
        VideoSource(0, resolution=(0, 720))
    with pytest.raises(ArgumentError, match="fourcc"):
        VideoSource(0, fourcc="H264")
    with pytest.raises(ArgumentError, match="USB cameras"):
        VideoSource("rtsp://127.0.0.1:9/cam", resolution=(640, 480))


def test_stats_say_which_mode_was_asked():
    src = VideoSource("/dev/video987", resolution=(640, 480), fps=30, fourcc="MJPG",
                      backoff_s=(0.1, 0.2), backend="ffmpeg")  # fmt: skip
    with StreamLoader([src], size=(32, 32), deadline_ms=100, timeout_s=30) as loader:
        start = time.monotonic()
        for _ in loader:
            if time.monotonic() - start > 0.5:
                break
        stats = loader.stats()["streams"][0]
    assert stats["camera_mode"] == {"asked": "MJPG 640x480 @ 30 fps", "opened": None}


@pytest.mark.parametrize(
    ("request_", "fake_camera"),
    [
        (CameraRequest((320, 240), 30, "MJPG"), "videotestsrc num-buffers=3 ! jpegenc"),
        (CameraRequest((320, 240), 30, "YUYV"), "videotestsrc num-buffers=3"),
        (CameraRequest((320, 240), 30, None), "videotestsrc num-buffers=3"),
    ],
)
def test_the_camera_pipelines_run_with_a_test_source_for_the_camera(request_, fake_camera):
    """All but v4l2src runs here: a test source stands where the camera would be."""
    import shutil
    import subprocess

    if shutil.which("gst-launch-1.0") is None:
        pytest.skip("gst-launch-1.0 is not installed")
    pipeline = _target("software", request_, []).open_string
    head = 'v4l2src device="/dev/video0"'
    assert pipeline.startswith(head)
    text = fake_camera + pipeline[len(head) :].replace(
        "appsink drop=true max-buffers=1 sync=false", "fakesink"
    )
    done = subprocess.run(["gst-launch-1.0", "-q", *_split(text)], capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, (text, done.stderr)


def _split(text: str) -> list[str]:
    import shlex

    return shlex.split(text)
