"""The GStreamer pipelines edgeload writes, as text: per codec, container and board.

These need no GStreamer (the elements a board has are passed in); test_gst.py runs the
ones this machine can run.
"""

from __future__ import annotations

import pytest

from edgeload.errors import SourceError

# Internal: the pipeline for a given codec and container (info=), without a board.
from edgeload.video._capture import build_target
from edgeload.video._gstreamer import Output, StreamInfo, decode_pipeline

EVERYTHING = frozenset(
    [
        "h264parse",
        "h265parse",
        "jpegparse",
        "avdec_h264",
        "avdec_h265",
        "jpegdec",
        "vp8dec",
        "vp9dec",
        "av1parse",
        "av1dec",
        "rtph264depay",
        "rtph265depay",
        "rtpjpegdepay",
    ]
)


def has(names=EVERYTHING):
    return lambda name: name in names


@pytest.mark.parametrize(
    ("codec", "container", "chain"),
    [
        ("h264", "mp4", "qtdemux ! h264parse ! avdec_h264"),
        ("h265", "mp4", "qtdemux ! h265parse ! avdec_h265"),
        ("h265", "mkv", "matroskademux ! h265parse ! avdec_h265"),
        ("h264", "ts", "tsdemux ! h264parse ! avdec_h264"),
        ("mjpeg", "avi", "avidemux ! jpegparse ! jpegdec"),
        ("vp9", "mkv", "matroskademux ! vp9dec"),
        ("h264", "", "parsebin ! h264parse ! avdec_h264"),  # a container no one could name
        ("", "mp4", "qtdemux ! decodebin"),  # a codec no one could name: by rank
    ],
)
def test_file_pipeline_follows_the_codec_and_container(codec, container, chain):
    pipeline, yuv = decode_pipeline(
        "file", "/v/a.bin", "software", info=StreamInfo(codec, container, 1920, 1080),
        out=Output(size=(640, 640)), elements=has(),
    )  # fmt: skip
    assert pipeline == (
        f'filesrc location="/v/a.bin" ! {chain} ! videoconvert ! '
        "video/x-raw,format=I420 ! appsink max-buffers=2 sync=false"
    )
    assert yuv == "I420"


def test_rtsp_pipeline_depays_the_codec_and_limits_the_rate_upstream():
    pipeline, _ = decode_pipeline(
        "rtsp", "rtsp://cam/x", "software", transport="udp", info=StreamInfo("h265", "rtp"),
        out=Output(size=(320, 320), fps=5), elements=has(),
    )  # fmt: skip
    assert pipeline == (
        'rtspsrc location="rtsp://cam/x" latency=0 protocols=udp ! rtph265depay ! h265parse ! '
        "avdec_h265 ! videorate drop-only=true max-rate=5 ! videoconvert ! "
        "video/x-raw,format=I420 ! appsink drop=true max-buffers=1 sync=false"
    )


@pytest.mark.parametrize(
    ("size", "resize", "src", "dims"),
    [
        ((640, 640), "letterbox", (1920, 1080), ",width=640,height=360"),  # the inner box
        ((640, 640), "letterbox", (0, 0), ""),  # size not known yet: the writer letterboxes
        ((641, 480), "stretch", (1920, 1080), ""),  # 4:2:0 has no odd sides: full size
        (None, "stretch", (1920, 1080), ""),
    ],
)
def test_the_jetson_pipeline_asks_for_the_size_it_can(size, resize, src, dims):
    pipeline, yuv = decode_pipeline(
        "file", "/v/a.mp4", "jetson", info=StreamInfo("h264", "mp4", *src),
        out=Output(size=size, resize=resize), elements=has(EVERYTHING | {"nvv4l2decoder"}),
    )  # fmt: skip
    assert f"nvvidconv ! video/x-raw,format=NV12{dims} ! appsink" in pipeline and yuv == "NV12"


@pytest.mark.parametrize("resize", ["stretch", "letterbox"])
def test_software_decode_hands_over_the_decoded_size_for_the_writer_to_scale(resize):
    """No videoscale after a software decoder: the frame writer scales the I420 planes,
    for less CPU, and a frame the reader skips is never scaled."""
    pipeline, yuv = decode_pipeline(
        "file", "/v/a.mp4", "software", info=StreamInfo("h264", "mp4", 1920, 1080),
        out=Output(size=(640, 640), resize=resize), elements=has(),
    )  # fmt: skip
    assert pipeline.endswith("avdec_h264 ! videoconvert ! video/x-raw,format=I420 ! appsink "
                             "max-buffers=2 sync=false") and yuv == "I420"  # fmt: skip


@pytest.mark.parametrize(
    ("codec", "container", "chain"),
    [
        ("h264", "mp4", "h264parse ! avdec_h264 max-threads=1 ! "),
        ("h265", "mkv", "h265parse ! avdec_h265 max-threads=1 ! "),
        ("mjpeg", "avi", "jpegparse ! jpegdec ! "),  # one thread of its own: nothing to cap
    ],
)
def test_a_software_decoder_gets_the_plans_threads(codec, container, chain):
    pipeline, _ = decode_pipeline(
        "file", "/v/a.bin", "software", info=StreamInfo(codec, container, 1920, 1080),
        out=Output(size=(640, 640), threads=1), elements=has(),
    )  # fmt: skip
    assert chain in pipeline


def test_a_codec_without_a_decoder_names_it_and_what_to_install():
    with pytest.raises(
        SourceError, match=r"H265.*avdec_h265.*gstreamer1.0-libav.*backend='ffmpeg'"
    ):
        build_target(
            "file", "/v/a.mkv", backend="gstreamer", preferred="gstreamer", decoder="software",
            gstreamer=True, info=StreamInfo("h265", "mkv"), elements=has(EVERYTHING - {"avdec_h265"}),
        )  # fmt: skip
    with pytest.raises(SourceError, match=r"codec 'prores'.*backend='ffmpeg'"):
        decode_pipeline("file", "/v/a.mov", "software", info=StreamInfo("prores", "mp4"),
                        out=Output(), elements=has())  # fmt: skip
