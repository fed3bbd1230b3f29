"""The GStreamer pipelines edgeload writes for a source: found from the stream, decoded
the board's way, scaled and converted once at the target size.

**What is in the stream** (:func:`discover`).  The container comes from the file's first
bytes (``ftyp`` mp4/mov, EBML mkv/webm, 0x47 sync bytes MPEG-TS, ``RIFF....AVI``), or is
RTP for RTSP.  The codec and picture size come from GstPbutils' Discoverer where
python3-gi is importable, else from the open OpenCV's FFmpeg backend already does
(``CAP_PROP_FOURCC``), so the pipeline is the same where python3-gi is absent.  When
neither can tell, the pipeline falls back to ``decodebin`` (the decoder chosen by rank).

**The decoder** is the board's where it has one and the element exists (found with
``Gst.ElementFactory.find``, or ``gst-inspect-1.0 --exists`` without python3-gi; never
by plugin file names):

- Jetson: ``nvv4l2decoder enable-max-performance=1`` for H.264/H.265, and MJPEG with
  ``mjpeg=1`` after ``jpegparse`` (NVIDIA's Accelerated GStreamer guide, L4T r35/r36;
  DeepStream's Gst-nvvideo4linux2 page); where a live ``fps`` limit wants every Nth
  frame, ``drop-frame-interval=N`` so the rest never leave the decoder; then
  ``nvvidconv`` (the VIC) scales to NV12 at the target size.  A CSI camera is
  ``nvarguscamerasrc`` in NV12 at a sensor mode, scaled and flipped by ``nvvidconv``.
  The properties set are checked against the boards' gst-inspect outputs
  (tests/fixtures/gst-inspect/);
- Raspberry Pi 4 (BCM2711 and older): ``v4l2h264dec`` for H.264; a Pi camera module
  (``csi://N`` on a Pi) is ``libcamerasrc`` (camera N as ``cam -l`` lists it) in I420
  at the target size, scaled by the ISP (:func:`libcamera_pipeline`);
- Raspberry Pi 4/5 HEVC: the stateless ``v4l2slh265dec`` only after a start-up decode
  self-test passes (known failures: raspberrypi/linux#7363, #7536), else ``avdec_h265``;
- elsewhere software: ``avdec_h264``, ``avdec_h265``, ``jpegdec`` (MJPEG), ``vp8dec``,
  ``vp9dec``, ``av1dec``.

A codec with no decoder here is a :class:`~edgeload.errors.SourceError` naming the codec,
the package that has one and ``backend="ffmpeg"``: a pipeline that cannot negotiate would
otherwise be retried for ever.

**The output** is YUV that OpenCV's GStreamer backend hands over as one (H*3/2, W)
plane without converting; the frame writer turns it into BGR/RGB with one
``cv2.cvtColor`` straight into the batch place.  On a Jetson it is NV12 at the target
size (the letterbox's inner box when ``resize="letterbox"``), scaled by the VIC.  A
software decoder's I420 arrives at the decoded size and the writer scales the planes
with ``cv2.resize`` before converting: GStreamer's ``videoscale`` costs about twice as
much CPU for the same filter, and a frame the reader skips is then never scaled
(docs/performance.md).  A camera's YUY2 or 4:2:2 JPEG is scaled in the pipeline
(``videoscale ! videoconvert``), so it is never converted at full size.  Full-size BGR
frames and a ``cv2.resize`` would cost more than the decode itself.  A live source's
``fps`` limit is a ``videorate drop-only=true max-rate=N`` after the decoder, so a
skipped frame is never scaled or converted; a file's stays in the reader (it counts
frames by index, and grabs a skipped frame without retrieving it).

Every value placed into a pipeline goes through :func:`quote`.  Live inputs end in
``appsink drop=true max-buffers=1 sync=false`` so a slow consumer never builds lag.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal

LIVE_SINK = "appsink drop=true max-buffers=1 sync=false"
JETSON_MAX_DROP_INTERVAL = 30  # nvv4l2decoder's drop-frame-interval range is 0-30
FILE_SINK = "appsink max-buffers=2 sync=false"
TO_BGR = "videoconvert ! video/x-raw,format=BGR"

Codec = Literal["h264", "h265", "mjpeg", "vp8", "vp9", "av1", ""]
Container = Literal["mp4", "mkv", "ts", "avi", "rtp", ""]
YuvLayout = Literal["I420", "NV12"]


@dataclass(frozen=True)
class CodecElements:
    """The GStreamer elements one codec needs, and where a software decoder lives."""

    parse: str
    software: str
    depay: str
    package: str


CODECS: dict[str, CodecElements] = {
    "h264": CodecElements("h264parse", "avdec_h264", "rtph264depay", "gstreamer1.0-libav"),
    "h265": CodecElements("h265parse", "avdec_h265", "rtph265depay", "gstreamer1.0-libav"),
    "mjpeg": CodecElements("jpegparse", "jpegdec", "rtpjpegdepay", "gstreamer1.0-plugins-good"),
    "vp8": CodecElements("", "vp8dec", "rtpvp8depay", "gstreamer1.0-plugins-good"),
    "vp9": CodecElements("", "vp9dec", "rtpvp9depay", "gstreamer1.0-plugins-good"),
    "av1": CodecElements("av1parse", "av1dec", "rtpav1depay", "gstreamer1.0-plugins-bad"),
}
DEMUXERS = {"mp4": "qtdemux", "mkv": "matroskademux", "ts": "tsdemux", "avi": "avidemux"}
_CAPS_CODECS = {
    "video/x-h264": "h264",
    "video/x-h265": "h265",
    "image/jpeg": "mjpeg",
    "video/x-vp8": "vp8",
    "video/x-vp9": "vp9",
    "video/x-av1": "av1",
}
_FOURCC_CODECS = {
    "h264": "h264", "avc1": "h264", "x264": "h264", "avc3": "h264",
    "hevc": "h265", "hev1": "h265", "hvc1": "h265", "h265": "h265",
    "mjpg": "mjpeg", "jpeg": "mjpeg", "mjpa": "mjpeg",
    "vp80": "vp8", "vp08": "vp8", "vp90": "vp9", "vp09": "vp9", "av01": "av1",
}  # fmt: skip


@dataclass(frozen=True)
class StreamInfo:
    """What :func:`discover` found: codec, container and picture size ('' / 0: unknown)."""

    codec: str = ""
    container: str = ""
    width: int = 0
    height: int = 0
    found_by: str = ""
    """``discoverer`` (GstPbutils), ``ffmpeg`` (OpenCV's FFmpeg) or '' (nothing could tell)."""
    fps: float = 0.0
    """The stream's frame rate; 0: unknown."""


@dataclass(frozen=True)
class Output:
    """What the pipeline hands OpenCV: its size and whether a live fps limit applies,
    and what a software decoder may spend on it."""

    size: tuple[int, int] | None = None
    """The loader's ``(width, height)``; None: the stream's own size."""
    resize: str = "stretch"
    fps: float | None = None
    threads: int = 0
    """Threads of a software ``avdec_*`` decoder (the plan's per-stream decoder
    threads); 0: its own choice, one per core."""


def quote(value: str) -> str:
    """``value`` as one quoted GStreamer property value: it cannot end the property or
    add elements, whatever it holds (``!``, quotes, spaces, ``=``).

    gst-launch syntax reads a double-quoted string as one token and takes a backslash
    inside it to escape the next character.
    """
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def hardware_decoder(platform: Any) -> str:
    """The board's decoder family: ``jetson``, ``rpi4``, ``rpi5`` or ``software``."""
    family = str(getattr(platform, "family", "") or "")
    soc = str(getattr(platform, "soc", "") or "").lower()
    if family == "jetson":
        return "jetson"
    if family == "raspberry_pi":
        # Only BCM2711 and older have the V4L2 H.264 decoder; a Pi 5 (BCM2712) has HEVC only.
        if any(s in soc for s in ("2711", "2837", "2836", "2835")):
            return "rpi4"
        if "2712" in soc:
            return "rpi5"
    return "software"


# -- which elements this GStreamer has -------------------------------------------------


@functools.lru_cache(maxsize=None)
def has_element(name: str) -> bool:
    """Whether this GStreamer has element ``name`` (python3-gi, else gst-inspect-1.0)."""
    gst = _gst()
    if gst is not None:
        return gst.ElementFactory.find(name) is not None
    tool = shutil.which("gst-inspect-1.0")
    if tool is None:
        return False
    try:
        return subprocess.run([tool, "--exists", name], timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@functools.lru_cache(maxsize=1)
def _gst() -> Any:
    """GStreamer's Python module, initialised, or None without python3-gi."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # gi's importer warns on Python 3.10+
            import gi

            gi.require_version("Gst", "1.0")
            gi.require_version("GstPbutils", "1.0")
            from gi.repository import Gst, GstPbutils  # noqa: F401
    except (ImportError, ValueError):
        return None
    Gst.init(None)
    return Gst


Elements = Callable[[str], bool]

# The boards' own elements edgeload's pipelines name (NVIDIA's Accelerated GStreamer
# guide; Pi OS's GStreamer and libcamera packages).  Every other element they name is
# GStreamer's own (base, good, bad, libav), which each board's distribution has.
BOARD_ELEMENTS: dict[str, frozenset[str]] = {
    "jetson": frozenset({"nvv4l2decoder", "nvvidconv", "nvarguscamerasrc"}),
    "rpi4": frozenset({"v4l2h264dec", "v4l2slh265dec", "libcamerasrc"}),
    "rpi5": frozenset({"v4l2slh265dec", "libcamerasrc"}),
    "software": frozenset(),
}


def board_elements(board: str) -> Elements:
    """Whether ``board``'s own GStreamer has an element: what a board's tree (``edgeload
    probe --root``) is shown with, as its GStreamer cannot be asked from here."""
    own = BOARD_ELEMENTS.get(board, frozenset())
    others = frozenset().union(*BOARD_ELEMENTS.values()) - own
    return lambda name: name not in others


# -- what is in the stream --------------------------------------------------------------


def sniff_container(path: str) -> str:
    """The container of the file at ``path`` from its first bytes; '' when unknown."""
    try:
        with open(path, "rb") as f:
            head = f.read(512)
    except OSError:
        return ""
    if head[4:8] == b"ftyp" or head[4:8] in (b"moov", b"mdat", b"free", b"wide"):
        return "mp4"
    if head[:4] == b"\x1a\x45\xdf\xa3":
        return "mkv"
    if head[:4] == b"RIFF" and head[8:12] == b"AVI ":
        return "avi"
    if len(head) > 376 and head[0] == head[188] == head[376] == 0x47:
        return "ts"
    return ""


def discover(kind: str, location: str, *, timeout_s: float) -> StreamInfo:
    """Find the codec, container and size of a file or RTSP stream within ``timeout_s``."""
    container = "rtp" if kind == "rtsp" else sniff_container(location)
    info = _discover_gst(kind, location, timeout_s)
    if info is None:
        info = _discover_ffmpeg(location, timeout_s)
    if info is None:
        return StreamInfo(container=container)
    codec, width, height, how, fps = info
    return StreamInfo(codec, container, width, height, how, fps)


def _discover_gst(
    kind: str, location: str, timeout_s: float
) -> tuple[str, int, int, str, float] | None:
    gst = _gst()
    if gst is None:
        return None
    from gi.repository import GstPbutils  # loaded by _gst()

    uri = Path(location).resolve().as_uri() if kind == "file" else location
    try:
        found = GstPbutils.Discoverer.new(int(timeout_s * gst.SECOND)).discover_uri(uri)
    except Exception:  # GLib.Error: unreachable, timed out, not a stream
        return None
    for stream in found.get_video_streams():
        caps = stream.get_caps()
        name = caps.get_structure(0).get_name() if caps and caps.get_size() else ""
        num, den = stream.get_framerate_num(), stream.get_framerate_denom()
        fps = num / den if num > 0 and den > 0 else 0.0
        codec = _CAPS_CODECS.get(name, name)
        return codec, stream.get_width(), stream.get_height(), "discoverer", fps
    return None


def _discover_ffmpeg(location: str, timeout_s: float) -> tuple[str, int, int, str, float] | None:
    try:
        import cv2
    except ImportError:
        return None
    params = []
    if hasattr(cv2, "CAP_PROP_OPEN_TIMEOUT_MSEC"):
        params = [cv2.CAP_PROP_OPEN_TIMEOUT_MSEC, int(timeout_s * 1000)]
    try:
        cap = cv2.VideoCapture(location, cv2.CAP_FFMPEG, params)
    except (TypeError, cv2.error):
        cap = cv2.VideoCapture(location, cv2.CAP_FFMPEG)
    try:
        if not cap.isOpened():
            return None
        code = int(cap.get(cv2.CAP_PROP_FOURCC))
        fourcc = "".join(chr((code >> (8 * i)) & 0xFF) for i in range(4)).strip("\0 ").lower()
        size = int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)), int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT))
        fps = float(cap.get(cv2.CAP_PROP_FPS) or 0.0)
    finally:
        cap.release()
    return _FOURCC_CODECS.get(fourcc, fourcc), size[0], size[1], "ffmpeg", fps


# -- the pipeline -----------------------------------------------------------------------


def decode_chain(
    codec: str, board: str, elements: Elements, *, source: str, drop: int = 0, threads: int = 0
) -> str:
    """The decoder (with its parser) for ``codec`` on ``board``.

    ``drop`` > 1 asks a Jetson's decoder to hand over only every ``drop``-th frame
    (``drop-frame-interval``), so frames a live ``fps`` limit skips never leave it.
    ``threads`` > 0 caps a software ``avdec_*`` decoder's threads (``max-threads``):
    its default of one frame thread per core costs CPU per frame (threads that wait
    for each other) and a frame of latency per extra thread, which many streams on
    few cores do not need.

    Raises:
        SourceError: no decoder for ``codec`` here; names what to install.
    """
    from ..errors import SourceError

    parts = CODECS.get(codec)
    if parts is None:
        raise SourceError(
            f"video source {source!r}: codec {codec!r} has no GStreamer pipeline in edgeload "
            f"(it decodes {', '.join(CODECS)}); pass backend='ffmpeg' to read it through "
            "OpenCV's FFmpeg",
            source=source,
        )
    parse = f"{parts.parse} ! " if parts.parse and elements(parts.parse) else ""
    if board == "jetson" and codec in ("h264", "h265", "mjpeg") and elements("nvv4l2decoder"):
        # NVIDIA's decoder takes MJPEG with its JPEG block opened (mjpeg=1), after
        # jpegparse (DeepStream's Gst-nvvideo4linux2 notes).
        mjpeg = " mjpeg=1" if codec == "mjpeg" else ""
        interval = f" drop-frame-interval={min(drop, JETSON_MAX_DROP_INTERVAL)}" if drop > 1 else ""
        return f"{parse}nvv4l2decoder{mjpeg} enable-max-performance=1{interval}"
    if board == "rpi4" and codec == "h264" and elements("v4l2h264dec"):
        return f"{parse}v4l2h264dec"
    if (
        board in ("rpi4", "rpi5")
        and codec == "h265"
        and elements("v4l2slh265dec")
        and hevc_self_test()
    ):
        return f"{parse}v4l2slh265dec"
    if not elements(parts.software):
        raise SourceError(
            f"video source {source!r}: its codec is {codec.upper()}, and this GStreamer has "
            f"no decoder for it ({parts.software}); install {parts.package}, or pass "
            "backend='ffmpeg' to decode it through OpenCV's FFmpeg",
            source=source,
        )
    capped = threads > 0 and parts.software.startswith("avdec_")
    return f"{parse}{parts.software}" + (f" max-threads={threads}" if capped else "")


@functools.lru_cache(maxsize=1)
def hevc_self_test() -> bool:
    """Whether the Pi's stateless HEVC decoder decodes a short clip here (once a process).

    ``v4l2slh265dec`` exists on kernels where it then fails or hangs on real streams
    (raspberrypi/linux#7363, #7536): a bounded ``gst-launch-1.0`` run decides.
    """
    tool = shutil.which("gst-launch-1.0")
    if tool is None:
        return False
    pipeline = (
        "videotestsrc num-buffers=10 ! video/x-raw,width=320,height=240 ! x265enc ! "
        "h265parse ! v4l2slh265dec ! fakesink"
    )
    try:
        done = subprocess.run([tool, "-q", *pipeline.split()], timeout=20, capture_output=True)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def letterbox_box(src: tuple[int, int], size: tuple[int, int]) -> tuple[int, int]:
    """The picture's ``(width, height)`` inside ``size`` when letterboxed, as the frame
    writer computes it."""
    (src_w, src_h), (w, h) = src, size
    scale = min(w / src_w, h / src_h)
    return max(1, round(src_w * scale)), max(1, round(src_h * scale))


def output_chain(
    board: str, out: Output, info: StreamInfo, *, live: bool, scale: bool = False
) -> tuple[str, str]:
    """The elements after the decoder, up to the appsink, and the YUV layout they hand
    OpenCV.

    The layout depends on the board only, so it is known before an RTSP stream's codec
    is.  A Jetson's VIC scales to the target size; elsewhere the decoded I420 passes
    through at its own size and the frame writer scales the planes, unless ``scale``
    (a camera's YUY2 or 4:2:2 JPEG, which would otherwise be converted at full size:
    ``videoscale`` first, then ``videoconvert`` on the few pixels left).  A size the
    pipeline cannot ask for (an odd side, which 4:2:0 cannot hold, or a letterbox box of
    a picture whose size is not known yet) is left to the frame writer.
    """
    rate = (
        f"videorate drop-only=true max-rate={max(1, round(out.fps))} ! " if live and out.fps else ""
    )
    size = out.size
    if size is not None and out.resize == "letterbox":
        size = letterbox_box((info.width, info.height), size) if info.width else None
    if size is not None and (size[0] % 2 or size[1] % 2):
        size = None
    dims = f",width={size[0]},height={size[1]}" if size else ""
    if board == "jetson":
        # The VIC scales and converts (NVMM or system memory) frames; JetPack's OpenCV
        # takes NV12, not BGRx (opencv/opencv#25602 added BGRx later).
        return f"{rate}nvvidconv ! video/x-raw,format=NV12{dims}", "NV12"
    if scale and size:
        return f"{rate}videoscale ! videoconvert ! video/x-raw,format=I420{dims}", "I420"
    # A software decoder's I420 passes videoconvert untouched and the frame writer
    # scales the planes (cv2.resize) after OpenCV hands the frame over: GStreamer's
    # videoscale costs about twice as much CPU for the same 2-tap linear filter, and a
    # frame the reader skips is then never scaled.
    return f"{rate}videoconvert ! video/x-raw,format=I420", "I420"


def decode_pipeline(
    kind: str,
    location: str,
    board: str,
    *,
    transport: str = "tcp",
    recorded: bool = False,
    info: StreamInfo,
    out: Output,
    elements: Elements = has_element,
) -> tuple[str, str]:
    """The pipeline for a file, RTSP or HTTP stream with ``info``'s codec and container,
    decoded on ``board``, and the YUV layout it delivers ('' for BGR).

    Raises:
        SourceError: the codec has no decoder here.
    """
    # A recorded file over HTTP is read to its end, every frame: no live sink.
    live = kind != "file" and not (kind == "http" and recorded)
    sink = LIVE_SINK if live else FILE_SINK
    if kind == "rtsp":
        # rtspsrc tries UDP first and falls back to TCP only after a timeout: ask.
        head = f"rtspsrc location={quote(location)} latency=0 protocols={transport}"
        if info.codec:
            head += f" ! {CODECS[info.codec].depay}" if info.codec in CODECS else ""
    elif kind == "http":
        head = f"souphttpsrc location={quote(location)}" + (" is-live=true" if live else "")
        info = StreamInfo()  # decodebin finds what it is
    else:
        head = f"filesrc location={quote(location)}"
        demux = DEMUXERS.get(info.container)
        head += f" ! {demux}" if demux else " ! parsebin"
    drop = 0
    if live and board == "jetson" and out.fps and info.fps > out.fps:
        # Every drop-th frame still arrives at least at out.fps; videorate trims the rest.
        drop = int(info.fps // out.fps)
    if info.codec:
        chain = decode_chain(info.codec, board, elements, source=location, drop=drop,
                             threads=out.threads)  # fmt: skip
    else:
        chain = "decodebin"  # nothing could tell the codec: the decoder chosen by rank
    tail, yuv = output_chain(board, out, info, live=live)
    return f"{head} ! {chain} ! {tail} ! {sink}", yuv


CSI_CAPTURE = (1920, 1080, 30)
"""The sensor mode asked of a CSI camera: one the common Jetson sensors (IMX219,
IMX477) have."""


def csi_pipeline(
    sensor: int,
    out: Output,
    *,
    capture: tuple[int, int, int] = CSI_CAPTURE,
    flip: int = 0,
) -> tuple[str, str]:
    """A Jetson CSI camera (``csi://N``) through Argus, scaled by the VIC to NV12 at
    the loader's size (as jetson-utils' gstCamera does), and the YUV layout.

    Args:
        capture: the sensor mode ``(width, height, fps)`` Argus is asked for.
        flip: ``nvvidconv flip-method`` (0 none ... 7; see its gst-inspect).
    """
    w, h, rate = capture
    size = out.size
    if size is not None and out.resize == "letterbox":
        size = letterbox_box((w, h), size)
    if size is not None and (size[0] % 2 or size[1] % 2):
        size = None
    dims = f",width={size[0]},height={size[1]}" if size else ""
    limit = f"videorate drop-only=true max-rate={max(1, round(out.fps))} ! " if out.fps else ""
    return (
        f"nvarguscamerasrc sensor-id={sensor} ! "
        f"video/x-raw(memory:NVMM),width={w},height={h},framerate={rate}/1,format=NV12 ! "
        f"{limit}nvvidconv flip-method={flip} ! video/x-raw,format=NV12{dims} ! {LIVE_SINK}"
    ), "NV12"


def device_pipeline(
    device: str,
    mode: Any = None,
    *,
    board: str = "",
    out: Output | None = None,
    elements: Elements = has_element,
) -> tuple[str, str]:
    """A V4L2 camera (``/dev/videoN``) in ``mode`` (a :class:`~edgeload.video._v4l2.CameraMode`,
    None: the camera's default), and the YUV layout it delivers ('' for BGR).

    MJPEG is decoded by ``nvv4l2decoder mjpeg=1`` on a Jetson (NVIDIA's Accelerated
    GStreamer guide), else ``jpegdec``; raw YUYV is ``YUY2`` in GStreamer's caps.  A mode
    of unknown format asks for either, raw or JPEG, and ``decodebin`` takes what comes.
    With a mode the frames are scaled once to the loader's size, as a decoded stream's.
    """
    head = f"v4l2src device={quote(device)}"
    if mode is None:
        return f"{head} ! {TO_BGR} ! {LIVE_SINK}", ""
    dims = f",width={mode.width},height={mode.height}" if mode.width and mode.height else ""
    if mode.fps:
        from ._v4l2 import framerate

        dims += f",framerate={framerate(mode.fps)}"
    if mode.fourcc in ("MJPG", "JPEG"):
        if board == "jetson" and elements("nvv4l2decoder"):
            chain = f"image/jpeg{dims} ! jpegparse ! nvv4l2decoder mjpeg=1"
        else:
            chain = f"image/jpeg{dims} ! jpegdec"
    elif mode.fourcc == "YUYV":
        chain = f"video/x-raw,format=YUY2{dims}"
    elif mode.fourcc:
        from ..errors import SourceError

        raise SourceError(
            f"video source {device!r}: edgeload has no GStreamer caps for camera format "
            f"{mode.fourcc!r}; ask for fourcc='MJPG' or 'YUYV', or write the pipeline after 'gst:'",
            source=device,
        )
    else:
        chain = quote(f"video/x-raw{dims};image/jpeg{dims}") + " ! decodebin"
    info = StreamInfo(width=mode.width, height=mode.height)
    tail, yuv = output_chain(board, out or Output(), info, live=True, scale=True)
    return f"{head} ! {chain} ! {tail} ! {LIVE_SINK}", yuv


def libcamera_pipeline(
    index: int,
    out: Output,
    *,
    cameras: list[str] | None,
    capture: tuple[int, int, int] = CSI_CAPTURE,
) -> tuple[str, str]:
    """A Raspberry Pi camera module (``csi://N`` on a Pi) through libcamera's GStreamer
    element, and the YUV layout it delivers.

    The Pi's ISP scales to the loader's size, so the caps ask for that size in I420 and
    nothing after the source scales or converts; the rate is asked of the sensor (an
    ``fps`` limit, else ``capture``'s), so a frame never wanted is never made.  Camera N
    is ``cameras[N]``, libcamera's id as ``cam -l`` lists it; where they cannot be
    listed (None), camera 0 is libcamerasrc's default (the first camera).

    Raises:
        SourceError: camera N is not listed, or N > 0 and the cameras cannot be listed.
    """
    from ..errors import SourceError

    if cameras is not None and index < len(cameras):
        head = f"libcamerasrc camera-name={quote(cameras[index])}"
    elif index == 0 and cameras is None:
        head = "libcamerasrc"
    else:
        have = (
            "they cannot be listed: install libcamera-tools for `cam -l`"
            if cameras is None
            else "cameras: " + (", ".join(f"{i}: {c}" for i, c in enumerate(cameras)) or "none")
        )
        raise SourceError(
            f"video source 'csi://{index}': no Raspberry Pi camera {index} ({have}); check "
            "the ribbon cable and `rpicam-hello --list-cameras`",
            source=f"csi://{index}",
        )
    (width, height), rate = pi_camera_output(out, capture)
    from ._v4l2 import framerate

    caps = f"video/x-raw,format=I420,width={width},height={height},framerate={framerate(rate)}"
    return f"{head} ! {caps} ! {LIVE_SINK}", "I420"


def pi_camera_output(
    out: Output, capture: tuple[int, int, int] = CSI_CAPTURE
) -> tuple[tuple[int, int], float]:
    """The size and rate a Pi camera module's ISP is asked for: the loader's size (the
    letterbox's inner box), even on both sides, at the ``fps`` limit or ``capture``'s rate.

    Both the ISP's 4:2:0 output and picamera2 need even sides: they are rounded down,
    and the frame writer resizes the last pixel.
    """
    w, h, rate = capture
    size = out.size or (w, h)
    if out.resize == "letterbox":
        size = letterbox_box((w, h), size)
    even = max(2, size[0] - size[0] % 2), max(2, size[1] - size[1] % 2)
    return even, min(out.fps, rate) if out.fps else float(rate)


_CAM_LIST = re.compile(r"^\s*\d+:\s.*\((\S.*)\)\s*$")


def parse_cam_list(text: str) -> list[str]:
    """libcamera's camera ids from ``cam -l`` (``1: 'imx219' (/base/soc/.../imx219@10)``),
    in order: ``csi://0`` is the first."""
    return [m.group(1) for m in map(_CAM_LIST.match, text.splitlines()) if m]


def list_pi_cameras(*, timeout_s: float = 5.0) -> list[str] | None:
    """The Pi's camera ids from ``cam -l`` (empty: libcamera found none); None where the
    tool is missing or fails."""
    tool = shutil.which("cam")
    if tool is None:
        return None
    try:
        done = subprocess.run([tool, "-l"], capture_output=True, text=True,
                              timeout=timeout_s, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_cam_list(done.stdout) if done.returncode == 0 else None
