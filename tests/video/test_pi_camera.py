"""The Raspberry Pi camera module: csi://N on a Pi is libcamerasrc, scaled by the ISP.

No Pi camera (nor a libcamera virtual camera) exists here: the pipelines are checked as
text, against libcamera's real ``cam --list`` output (tests/fixtures/libcamera/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgeload.errors import SourceError

# Internal: a Pi's libcamera camera list is injected (pi_cameras=, `cam -l` output).
from edgeload.video._capture import build_target
from edgeload.video._gstreamer import Output, parse_cam_list

CAM_LIST = Path(__file__).resolve().parents[1] / "fixtures" / "libcamera" / "cam-list.txt"
PI_ID = "/base/soc/i2c0mux/i2c@1/imx519@1a"


def _target(index, board, cameras, out):
    return build_target("csi", str(index), backend="auto", preferred="gstreamer",
                        decoder=board, gstreamer=True, output=out,
                        pi_cameras=cameras)  # fmt: skip


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
    with pytest.raises(SourceError, match="none listed"):
        _target(1, "rpi4", [], Output())
    # camera 0 without a list: libcamerasrc's default camera
    assert _target(0, "rpi4", [], Output()).open_string.startswith("libcamerasrc ! ")
