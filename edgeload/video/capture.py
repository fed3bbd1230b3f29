"""Where a source's frames come from: parse the input, pick the OpenCV backend, open it.

A source string becomes a :class:`Target`: its kind, the backend (``gstreamer`` or
``ffmpeg``, or ``any`` for local cameras) and the exact string OpenCV opens, so the
chosen pipeline is visible in stats.  GStreamer is chosen where the platform's plan
says so and this OpenCV has it, with the board's hardware decoder (the pipelines are
in :mod:`edgeload.video._gstreamer`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from .._deps import require_cv2
from ..errors import SourceError
from ..vocabulary import DecodeBackend, DecodeBackendSetting
from ._cv_features import capture_features
from ._ffmpeg import OPTIONS_VAR, THREADS_VAR, network_options, scoped_env
from ._gstreamer import LIVE_SINK, TO_BGR, csi_pipeline, decode_pipeline, device_pipeline

SourceKind = Literal["file", "rtsp", "http", "device", "csi", "pipeline"]
Backend = Literal["gstreamer", "ffmpeg", "any"]
RtspTransport = Literal["tcp", "udp"]
LIVE_KINDS: tuple[SourceKind, ...] = ("rtsp", "http", "device", "csi", "pipeline")
# A file whose frames have at most this many pixels decodes with one FFmpeg thread,
# whatever the plan gives files.  At 320x240 a frame decodes in well under a
# millisecond: a second frame thread only adds GIL hand-offs and wake-ups (+14-25 %
# CPU per frame over one thread; 4 x 720p gains from two).  Twice 320x240's pixels
# (352x288 and 480x320 too; not 640x360, where one thread loses with a 640x640
# output) - docs/performance.md, "Small files".
SMALL_FILE_PIXELS = 2 * 320 * 240
NETWORK_KINDS: tuple[SourceKind, ...] = ("rtsp", "http")

_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")


@dataclass(frozen=True)
class Target:
    """What OpenCV opens for one source."""

    kind: SourceKind
    backend: Backend
    open_string: str
    """The path, URL or GStreamer pipeline passed to ``cv2.VideoCapture``."""
    index: int | None = None
    """The camera index for ``kind == "device"`` opened by index."""
    rtsp_transport: RtspTransport | None = None
    """RTSP only: ``tcp`` or ``udp`` as the source asked; None: TCP unless the
    ``OPENCV_FFMPEG_CAPTURE_OPTIONS`` environment variable names another."""

    @property
    def live(self) -> bool:
        """Whether frames arrive in real time (cameras, network streams, pipelines)."""
        return self.kind in LIVE_KINDS


def classify(uri: object) -> tuple[SourceKind, str | int]:
    """Say what kind of input ``uri`` is, checking what can be checked without opening it.

    Args:
        uri: a file path, ``rtsp://``/``http(s)://`` URL, camera index, ``/dev/videoN``,
            ``csi://N`` or a GStreamer pipeline (contains ``!``).

    Raises:
        SourceError: the file does not exist, the scheme is unknown or the pipeline
            is malformed; the message names the source and what to do.
    """
    if isinstance(uri, bool) or not isinstance(uri, (str, int, os.PathLike)):
        raise SourceError(
            f"video source {uri!r}: expected a path, URL, camera index or GStreamer "
            f"pipeline, got {type(uri).__name__}",
            source=uri,
        )
    if isinstance(uri, int):
        if uri < 0:
            raise SourceError(f"camera index {uri} is negative; use 0, 1, ...", source=uri)
        return "device", uri
    text = os.fspath(uri).strip()  # type: ignore[arg-type]
    if "!" in text:
        _check_pipeline(text)
        return "pipeline", text
    scheme = _SCHEME.match(text)
    if scheme:
        name = scheme.group(1).lower()
        if name in ("rtsp", "rtsps"):
            return "rtsp", text
        if name in ("http", "https"):
            return "http", text
        if name == "csi":
            rest = text[len("csi://") :]
            if not rest.isdigit():
                raise SourceError(
                    f"video source {text!r}: csi:// takes a sensor number, e.g. csi://0",
                    source=uri,
                )
            return "csi", rest
        if name == "file":
            text = text[len("file://") :]
        else:
            raise SourceError(
                f"video source {text!r}: unknown scheme {name!r}; use a file path, "
                "rtsp://, http(s)://, csi://N, /dev/videoN, a camera index or a "
                "GStreamer pipeline with '!'",
                source=uri,
            )
    if re.fullmatch(r"/dev/video\d+", text):
        return "device", text
    if text.isdigit():
        return "device", int(text)
    if not Path(text).is_file():
        raise SourceError(
            f"video file {text!r} does not exist (or is not a file); check the path, "
            "or give a URL with its scheme (rtsp://, http://)",
            source=uri,
        )
    return "file", text


def _check_pipeline(text: str) -> None:
    parts = [p.strip() for p in text.split("!")]
    if any(not p for p in parts) or text.count('"') % 2:
        raise SourceError(
            f"GStreamer pipeline {text!r} is malformed (an empty element between '!' or an "
            "unclosed quote); test it with gst-launch-1.0 first",
            source=text,
        )
    if not re.match(r"^[A-Za-z]", parts[0]) or "appsink" not in parts[-1]:
        raise SourceError(
            f"GStreamer pipeline {text!r} must start with a source element and end in "
            f"an appsink for OpenCV, e.g. '... ! {TO_BGR} ! {LIVE_SINK}'",
            source=text,
        )


def opencv_has(feature: DecodeBackend) -> bool:
    """Whether the installed OpenCV was built with ``feature`` (from its build information)."""
    cv2 = require_cv2()
    word = {"gstreamer": "GStreamer", "ffmpeg": "FFMPEG"}[feature]
    for line in cv2.getBuildInformation().splitlines():
        if line.strip().startswith(word + ":"):
            return "YES" in line.split(":", 1)[1]
    return False


def build_target(
    kind: SourceKind,
    value: str | int,
    *,
    backend: DecodeBackendSetting,
    preferred: DecodeBackend,
    decoder: str,
    gstreamer: bool | None = None,
    rtsp_transport: RtspTransport | None = None,
) -> Target:
    """Choose the backend and the string OpenCV opens for a classified source.

    Args:
        kind, value: from :func:`classify`.
        backend: the per-source override, or ``auto`` for ``preferred``.
        preferred: the plan's decode backend for this device.
        decoder: the decoder chain name from
            :func:`~edgeload.video._gstreamer.hardware_decoder`.
        gstreamer: whether OpenCV has GStreamer; None asks the installed OpenCV.
        rtsp_transport: the source's RTSP transport (``tcp``/``udp``), or None for TCP.

    Raises:
        SourceError: the source needs GStreamer and this OpenCV has none.
    """
    want = preferred if backend == "auto" else backend
    needs_gst = kind in ("csi", "pipeline")
    if gstreamer is None and (needs_gst or want == "gstreamer"):
        gstreamer = opencv_has("gstreamer")
    if (needs_gst or want == "gstreamer") and not gstreamer:
        if needs_gst or backend == "gstreamer":
            raise SourceError(
                f"video source {value!r} needs OpenCV with GStreamer, and this OpenCV has "
                "none; on a Jetson use JetPack's OpenCV (not opencv-python from pip), "
                "elsewhere pass a file or URL and backend='ffmpeg'",
                source=value,
            )
        want = "ffmpeg"
    if kind == "pipeline":
        return Target(kind, "gstreamer", str(value))
    if kind == "csi":
        return Target(kind, "gstreamer", csi_pipeline(int(value)))
    if kind == "device":
        if want == "gstreamer":
            dev = value if isinstance(value, str) else f"/dev/video{value}"
            return Target(kind, "gstreamer", device_pipeline(dev))
        index = value if isinstance(value, int) else int(str(value)[len("/dev/video") :])
        return Target(kind, "any", str(value), index=index)
    transport = rtsp_transport if kind == "rtsp" else None
    if want == "ffmpeg":
        return Target(kind, "ffmpeg", str(value), rtsp_transport=transport)
    pipeline = decode_pipeline(kind, str(value), decoder, transport or "tcp")
    return Target(kind, "gstreamer", pipeline, rtsp_transport=transport)


def open_capture(
    target: Target, *, open_timeout_s: float, read_timeout_s: float, ffmpeg_threads: int
) -> Any:
    """Open ``target`` and return the ``cv2.VideoCapture``, or None when it does not open.

    FFmpeg opens take OpenCV's global lock, so network opens carry an open timeout:
    a camera that accepts and never answers holds the lock for at most that long.
    RTSP goes over TCP unless the target asks for UDP.
    """
    cv2 = require_cv2()
    features = capture_features()  # what this OpenCV lacks: see _cv_features.py
    params: list[int] = []
    for usable, name, value in (
        (features.open_timeout, "CAP_PROP_OPEN_TIMEOUT_MSEC", int(open_timeout_s * 1000)),
        (features.read_timeout, "CAP_PROP_READ_TIMEOUT_MSEC", int(read_timeout_s * 1000)),
        (features.n_threads, "CAP_PROP_N_THREADS", ffmpeg_threads),
    ):
        # Only FFmpeg takes them all: OpenCV's GStreamer backend (4.6) fails the whole
        # open on a property it cannot set, and a camera index goes to V4L2.
        if usable and target.backend == "ffmpeg":
            params += [getattr(cv2, name), value]
    env: dict[str, str] = {}
    if target.backend == "ffmpeg" and target.kind in NETWORK_KINDS:
        env[OPTIONS_VAR] = network_options(target.rtsp_transport)
    if target.backend == "ffmpeg" and not features.n_threads:
        # Without CAP_PROP_N_THREADS (before 4.7) this variable is the only thread
        # control OpenCV might read; builds that ignore it leave FFmpeg's own count.
        env[THREADS_VAR] = str(ffmpeg_threads)
    api = {"gstreamer": cv2.CAP_GSTREAMER, "ffmpeg": cv2.CAP_FFMPEG, "any": cv2.CAP_ANY}
    where: str | int = target.index if target.index is not None else target.open_string
    # Set only for this open and put back after it: see edgeload/video/_ffmpeg.py.
    with scoped_env(env):
        try:
            cap = cv2.VideoCapture(where, api[target.backend], params)
        except (TypeError, cv2.error):
            cap = cv2.VideoCapture(where, api[target.backend])
    if not cap.isOpened():
        cap.release()
        return None
    return cap


def threads_for_size(target: Target, cap: Any, threads: int) -> int:
    """The FFmpeg threads a file opened as ``cap`` should decode with: one for frames
    of at most :data:`SMALL_FILE_PIXELS`, else ``threads``.

    Only the size, known once the capture is open, tells; and OpenCV reads
    ``CAP_PROP_N_THREADS`` only at open (``set`` after it returns False, 5.0), so a
    smaller count means opening again.  Live sources and captures whose threads this
    OpenCV cannot set keep ``threads``.
    """
    if threads <= 1 or target.kind != "file" or target.backend != "ffmpeg":
        return threads
    if not capture_features().n_threads:
        return threads
    cv2 = require_cv2()
    pixels = cap.get(cv2.CAP_PROP_FRAME_WIDTH) * cap.get(cv2.CAP_PROP_FRAME_HEIGHT)
    return 1 if 0 < pixels <= SMALL_FILE_PIXELS else threads
