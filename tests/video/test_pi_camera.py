"""The Raspberry Pi camera module: csi://N on a Pi is libcamerasrc, scaled by the ISP, or
picamera2 where OpenCV lacks GStreamer or libcamera's element is not installed.

No Pi camera (nor a libcamera virtual camera) exists here: the pipelines are checked as
text, against libcamera's real ``cam --list`` output (tests/fixtures/libcamera/) and
``gst-inspect-1.0 libcamerasrc`` (tests/fixtures/gst-inspect/, checked in
test_gst_boards.py); the picamera2 path by the configuration it asks for."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from edgeload.errors import SourceError
from edgeload.video import SourceState, VideoSource

# Internal: a Pi's libcamera camera list, its GStreamer elements and whether picamera2
# is installed are injected (pi_cameras=, elements=, picamera2=).
from edgeload.video._capture import build_target
from edgeload.video._gstreamer import Output, parse_cam_list

# Internal: the configuration picamera2 is asked for (no Pi camera here to open).
from edgeload.video._picamera2 import video_configuration

# Internal: one reader opens a Pi camera target built for a Pi (this box is none).
from edgeload.video._reader import StreamReader

CAM_LIST = Path(__file__).resolve().parents[1] / "fixtures" / "libcamera" / "cam-list.txt"
PI_ID = "/base/soc/i2c0mux/i2c@1/imx519@1a"


def _target(
    index, board, cameras, out, *, gstreamer=True, element=True, picamera2=False, backend="auto"
):
    return build_target("csi", str(index), backend=backend, preferred="gstreamer",
                        decoder=board, gstreamer=gstreamer, output=out, pi_cameras=lambda: cameras,
                        elements={"libcamerasrc"}.__contains__ if element else lambda name: False,
                        picamera2=picamera2)  # fmt: skip


def test_cam_list_gives_the_camera_ids_in_order():
    ids = parse_cam_list(CAM_LIST.read_text(encoding="utf-8"))
    assert ids == [
        "\\_SB_.PCI0.XHC_.RHUB.HS05-5:1.0-0408:5251",
        "\\_SB_.PCI0.XHC_.RHUB.HS05-5:1.2-0408:5251",
    ]


@pytest.mark.parametrize("board", ["rpi4", "rpi5"])
def test_csi_on_a_pi_is_libcamerasrc_at_the_target_size(board):
    target = _target(0, board, [PI_ID], Output(size=(640, 640), fps=15))
    assert target.open_string == (
        f'libcamerasrc camera-name="{PI_ID}" ! '
        "video/x-raw,format=I420,width=640,height=640,framerate=15/1 ! "
        "appsink drop=true max-buffers=1 sync=false"
    )
    assert target.yuv == "I420" and "nvarguscamerasrc" not in target.open_string


def test_camera_ids_are_quoted_and_letterbox_asks_for_the_inner_box():
    ids = parse_cam_list(CAM_LIST.read_text(encoding="utf-8"))
    target = _target(1, "rpi5", ids, Output(size=(640, 640), resize="letterbox"))
    assert 'camera-name="\\\\_SB_.PCI0.XHC_.RHUB.HS05-5:1.2-0408:5251"' in target.open_string
    assert "width=640,height=360,framerate=30/1" in target.open_string


def test_a_jetson_keeps_nvarguscamerasrc():
    assert _target(0, "jetson", [PI_ID], Output()).open_string.startswith("nvarguscamerasrc")


def test_a_camera_that_does_not_exist_names_the_cameras_there_are():
    with pytest.raises(SourceError, match=r"no Raspberry Pi camera 1 \(cameras: 0: /base"):
        _target(1, "rpi4", [PI_ID], Output())
    with pytest.raises(SourceError, match=r"no Raspberry Pi camera 0 \(cameras: none\)"):
        _target(0, "rpi4", [], Output())  # `cam -l` ran and libcamera found none
    with pytest.raises(SourceError, match="cannot be listed: install libcamera-tools"):
        _target(1, "rpi4", None, Output())
    # camera 0 where they cannot be listed: libcamerasrc's default camera
    assert _target(0, "rpi4", None, Output()).open_string.startswith("libcamerasrc ! ")


@pytest.mark.parametrize(
    ("gstreamer", "element"),
    [(False, False), (True, False)],  # pip's OpenCV; Pi OS's OpenCV without gstreamer1.0-libcamera
)
def test_without_libcamerasrc_picamera2_reads_the_camera_at_the_target_size(gstreamer, element):
    target = _target(1, "rpi5", [PI_ID], Output(size=(640, 640), resize="letterbox", fps=15),
                     gstreamer=gstreamer, element=element, picamera2=True)  # fmt: skip
    assert (target.backend, target.index) == ("picamera2", 1)
    # What stats and `edgeload probe --source` show: the camera and what its ISP makes.
    assert target.open_string == "picamera2 camera 1: main RGB888 640x360 at 15 fps"
    assert target.yuv == ""  # B,G,R from the ISP: the frame writer only copies


def test_libcamerasrc_is_preferred_where_it_exists():
    target = _target(0, "rpi4", [PI_ID], Output(), picamera2=True)
    assert target.backend == "gstreamer" and target.open_string.startswith("libcamerasrc")


def test_the_picamera2_configuration_follows_picamera2s_rules():
    # picamera2 refuses odd sizes; RGB888 is B,G,R in memory (OpenCV's order); the
    # sensor's rate is fixed through FrameDurationLimits, in microseconds.
    config = video_configuration((640, 360), 15.0)
    assert config == {
        "main": {"size": (640, 360), "format": "RGB888"},
        "controls": {"FrameDurationLimits": (66667, 66667)},
    }
    odd = _target(0, "rpi4", [], Output(size=(641, 481)), gstreamer=False, picamera2=True)
    assert "641x481" not in odd.open_string and "640x480" in odd.open_string


@pytest.mark.parametrize(
    ("gstreamer", "backend", "match"),
    [
        (False, "auto", r"picamera2 or an OpenCV with GStreamer.*python3-picamera2.*"
                        r"python3-opencv gstreamer1.0-libcamera"),
        (True, "auto", r"libcamerasrc\) or picamera2, and neither is installed: sudo apt install "
                       r"gstreamer1.0-libcamera, or python3-picamera2"),
        (True, "gstreamer", r"backend='gstreamer' needs libcamera's GStreamer element.*"
                            r"gstreamer1.0-libcamera.*backend='auto'"),
    ],
)  # fmt: skip
def test_with_neither_route_the_error_says_what_to_install(gstreamer, backend, match):
    with pytest.raises(SourceError, match=match):
        _target(0, "rpi5", [PI_ID], Output(), gstreamer=gstreamer, element=False,
                picamera2=backend == "gstreamer", backend=backend)  # fmt: skip


@pytest.mark.libcamera
def test_libcamera_finding_no_camera_is_a_source_error_at_once():
    # Debian trixie's libcamera, for real: its `cam -l` and libcamerasrc (the trixie
    # session). This machine has no camera (and no DMA heap for libcamera's virtual
    # one), so libcamera lists none: csi://0 fails now, not in endless reopens.
    with pytest.raises(SourceError, match=r"'csi://0': no Raspberry Pi camera 0 \(cameras: none\)"):
        build_target("csi", "0", backend="auto", preferred="gstreamer", decoder="rpi5",
                     gstreamer=True, output=Output(size=(640, 640)))  # fmt: skip


@pytest.mark.skipif(
    importlib.util.find_spec("picamera2") is not None, reason="picamera2 imports here"
)
def test_a_picamera2_that_does_not_import_fails_the_stream_at_once_saying_what_to_install():
    # pip's picamera2 in a plain venv finds no libcamera bindings; here there is no
    # picamera2 at all: the same ImportError, and no retry could mend it.
    target = _target(0, "rpi5", [], Output(size=(320, 240)), gstreamer=False, element=False,
                     picamera2=True)  # fmt: skip
    reader = StreamReader(VideoSource("csi://0"), target, stream_id=0,
                          sink=lambda *args: True)  # fmt: skip
    reader.start()
    assert reader.join(20)
    conn = reader.connection
    assert conn.phase is SourceState.FAILED and conn.attempts == 1
    assert conn.last_error is not None
    assert "'csi://0': picamera2 cannot be imported here (No module named 'picamera2')" in (
        conn.last_error.message
    )
    assert "sudo apt install python3-picamera2" in conn.last_error.message
