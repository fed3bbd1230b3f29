"""The Jetson and Raspberry Pi pipelines, as text, against the boards' real elements.

No board runs here: every element a board pipeline names must be one the board has, and
every property it sets must exist in that element's ``gst-inspect-1.0`` output (saved
from public material under tests/fixtures/gst-inspect/, sources in its README) with a
value of the right type, in range or one of the enum's values.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

# Internal: each board's GStreamer element list is injected (elements=); target_for()
# asks this machine's GStreamer, which has none of the boards' decoders.
from edgeload.video._capture import build_target
from edgeload.video._gstreamer import Output, StreamInfo, csi_pipeline, decode_pipeline

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gst-inspect"

# Elements a board's pipeline may name that GStreamer itself ships (their properties
# are GStreamer's own and run in test_gst.py).
GSTREAMER_ELEMENTS = frozenset(
    {
        "filesrc", "rtspsrc", "souphttpsrc", "qtdemux", "matroskademux", "tsdemux",
        "avidemux", "parsebin", "h264parse", "h265parse", "jpegparse", "rtph264depay",
        "rtph265depay", "rtpjpegdepay", "videorate", "videoscale", "videoconvert", "appsink",
        "avdec_h264", "avdec_h265", "jpegdec",
    }
)  # fmt: skip
JETSON = GSTREAMER_ELEMENTS | {"nvv4l2decoder", "nvvidconv", "nvarguscamerasrc"}
RPI4 = GSTREAMER_ELEMENTS | {"v4l2h264dec"}


def inspect(element: str) -> dict[str, tuple[str, object]]:
    """``{property: (type, allowed)}`` from a saved gst-inspect output: ``allowed`` is
    ``(low, high)`` for numbers, the enum's values and nicks for enums, None otherwise."""
    text = (FIXTURES / f"{element}.txt").read_text()
    props: dict[str, tuple[str, object]] = {}
    _, _, section = text.partition("Element Properties:")
    name = ""
    for line in section.splitlines():
        head = re.match(r"^  ([a-z][a-z0-9-]*)\s*:", line)
        if head:
            name = head.group(1)
            continue
        if not name:
            continue
        number = re.match(
            r"^\s+(Unsigned Integer|Integer|Unsigned Integer64|Float)\. Range:\s*(-?[\d.]+)\s*-\s*(-?[\d.]+)",
            line,
        )
        if number:
            props[name] = ("number", (float(number.group(2)), float(number.group(3))))
        elif re.match(r"^\s+Boolean\.", line):
            props[name] = ("boolean", None)
        elif re.match(r"^\s+Enum ", line):
            props[name] = ("enum", set())
        elif re.match(r"^\s+String\.", line):
            props[name] = ("string", None)
        value = re.match(r"^\s+\((\d+)\): (\S+)", line)
        if value and props.get(name, ("",))[0] == "enum":
            allowed = props[name][1]
            assert isinstance(allowed, set)
            allowed.update(value.groups())
    return props


def valid(kind: str, allowed: object, value: str) -> bool:
    if kind == "boolean":
        return value.lower() in ("true", "false", "1", "0")
    if kind == "number":
        low, high = allowed  # type: ignore[misc]
        try:
            return low <= float(value) <= high
        except ValueError:
            return False
    if kind == "enum":
        return value in allowed  # type: ignore[operator]
    return True


def elements_of(pipeline: str) -> list[tuple[str, dict[str, str]]]:
    """Each element of a pipeline with the properties it sets; caps are left out."""
    found = []
    for part in pipeline.split(" ! "):
        name, *settings = part.split()
        if "/" in name:
            continue  # caps
        found.append((name, dict(s.split("=", 1) for s in settings)))
    return found


def check_against_board(pipeline: str, board_elements: frozenset[str]) -> list[str]:
    """Every element on the board; every property of a board element in its fixture."""
    problems = []
    for name, settings in elements_of(pipeline):
        if name not in board_elements:
            problems.append(f"{name}: not on this board")
            continue
        if name in GSTREAMER_ELEMENTS:
            continue
        props = inspect(name)
        for key, value in settings.items():
            if key not in props:
                problems.append(f"{name} has no property {key!r}")
            elif not valid(*props[key], value.strip('"')):
                problems.append(f"{name} {key}={value}: not a valid {props[key]}")
    return problems


def jetson_pipelines() -> list[str]:
    out = Output(size=(640, 640))
    built = []
    for codec, container in (("h264", "mp4"), ("h265", "mkv"), ("mjpeg", "avi"), ("h265", "ts")):
        built.append(
            decode_pipeline(
                "file",
                "/v/a",
                "jetson",
                info=StreamInfo(codec, container, 1920, 1080),
                out=out,
                elements=JETSON.__contains__,
            )[0]
        )
    for codec in ("h264", "h265", "mjpeg"):
        built.append(
            decode_pipeline(
                "rtsp",
                "rtsp://cam/x",
                "jetson",
                info=StreamInfo(codec, "rtp", 1920, 1080, fps=30.0),
                out=Output(size=(640, 640), fps=5),
                elements=JETSON.__contains__,
            )[0]
        )
    for flip in range(8):
        built.append(csi_pipeline(1, Output(size=(640, 480), fps=15), flip=flip)[0])
    return built


@pytest.mark.parametrize("pipeline", jetson_pipelines())
def test_every_jetson_property_exists_on_the_board_with_a_valid_value(pipeline):
    assert check_against_board(pipeline, JETSON) == []


def test_the_check_catches_a_property_the_board_does_not_have():
    # The checker itself: a made-up property, a value out of range, an unknown element.
    assert check_against_board("nvv4l2decoder enable-turbo=1 ! fakesink", JETSON) == [
        "nvv4l2decoder has no property 'enable-turbo'",
        "fakesink: not on this board",
    ]
    assert check_against_board("nvv4l2decoder drop-frame-interval=31", JETSON) != []
    assert check_against_board("nvvidconv flip-method=8", JETSON) != []


def test_jetson_skips_frames_in_the_decoder_where_a_live_fps_limit_wants_fewer():
    pipeline, yuv = decode_pipeline(
        "rtsp", "rtsp://cam/x", "jetson", info=StreamInfo("h265", "rtp", 1920, 1080, fps=30.0),
        out=Output(size=(640, 640), fps=5), elements=JETSON.__contains__,
    )  # fmt: skip
    assert "h265parse ! nvv4l2decoder enable-max-performance=1 drop-frame-interval=6 ! " in pipeline
    # The decoder's every-6th leaves 5 fps; videorate trims a rate that does not divide.
    assert "videorate drop-only=true max-rate=5 ! nvvidconv ! " in pipeline
    assert pipeline.endswith("video/x-raw,format=NV12,width=640,height=640 ! " + _LIVE_SINK)
    assert yuv == "NV12"
    # A file's fps limit counts frames by index in the reader: the decoder keeps all.
    file_pipeline, _ = decode_pipeline(
        "file", "/v/a.mp4", "jetson", info=StreamInfo("h264", "mp4", 1920, 1080, fps=30.0),
        out=Output(size=(640, 640), fps=5), elements=JETSON.__contains__,
    )  # fmt: skip
    assert "drop-frame-interval" not in file_pipeline


def test_jetson_decodes_mjpeg_on_nvdec():
    pipeline, _ = decode_pipeline(
        "file", "/v/a.avi", "jetson", info=StreamInfo("mjpeg", "avi", 1280, 720),
        out=Output(size=(640, 640)), elements=JETSON.__contains__,
    )  # fmt: skip
    assert (
        "avidemux ! jpegparse ! nvv4l2decoder mjpeg=1 enable-max-performance=1 ! nvvidconv"
        in pipeline
    )


def test_a_jetson_csi_camera_hands_over_nv12_at_the_target_size():
    target = build_target(
        "csi", 0, backend="auto", preferred="gstreamer", decoder="jetson", gstreamer=True,
        output=Output(size=(640, 640), resize="letterbox"),
    )  # fmt: skip
    assert target.open_string == (
        "nvarguscamerasrc sensor-id=0 ! "
        "video/x-raw(memory:NVMM),width=1920,height=1080,framerate=30/1,format=NV12 ! "
        "nvvidconv flip-method=0 ! video/x-raw,format=NV12,width=640,height=360 ! " + _LIVE_SINK
    )
    assert target.yuv == "NV12"


def test_pi4_pipeline_names_only_elements_the_pi_has():
    pipeline, yuv = decode_pipeline(
        "file", "/v/a.mp4", "rpi4", info=StreamInfo("h264", "mp4", 1920, 1080),
        out=Output(size=(640, 640)), elements=RPI4.__contains__,
    )  # fmt: skip
    assert "h264parse ! v4l2h264dec ! " in pipeline and yuv == "I420"
    assert check_against_board(pipeline, RPI4) == []


@pytest.mark.parametrize("board", ["rpi4", "rpi5"])
def test_the_pi_camera_pipeline_sets_only_what_libcamerasrc_has(board):
    elements = RPI4 | {"libcamerasrc"}
    target = build_target(
        "csi", 1, backend="auto", preferred="gstreamer", decoder=board, gstreamer=True,
        output=Output(size=(640, 640)), elements=elements.__contains__,
        pi_cameras=lambda: ["/base/soc/i2c0mux/i2c@0/imx708@1a", "/base/soc/i2c0mux/i2c@1/imx219@10"],
    )  # fmt: skip
    assert target.open_string.startswith('libcamerasrc camera-name="/base/soc/i2c0mux/i2c@1/')
    assert check_against_board(target.open_string, frozenset(elements)) == []


_LIVE_SINK = "appsink drop=true max-buffers=1 sync=false"
