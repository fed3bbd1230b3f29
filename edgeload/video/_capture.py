"""Opening a source's ``cv2.VideoCapture``: the target, what this OpenCV can do, the FFmpeg
options of one open, and the stall guard that stands in for missing timeouts.

**The target.**  A source string becomes a :class:`Target`: its kind, the backend
(``gstreamer`` or ``ffmpeg``, or ``any`` for local cameras) and the exact string OpenCV
opens, so the chosen pipeline is visible in stats.  GStreamer is chosen where the
platform's plan says so and this OpenCV has it, with the board's hardware decoder (the
pipelines are in :mod:`edgeload.video._gstreamer`).

**What this OpenCV can do** (:func:`capture_features`), found at run time, and what
edgeload does without it.  The floor is OpenCV 4.5.1 (Debian bullseye); JetPack 5 ships
4.5.4, JetPack 6 4.8. Newer builds took on the controls edgeload uses for live streams:

- the ``params`` list of ``cv2.VideoCapture(source, api, params)``: 4.5.2;
- ``CAP_PROP_OPEN_TIMEOUT_MSEC`` and ``CAP_PROP_READ_TIMEOUT_MSEC``: 4.5.4 (through params);
- ``CAP_PROP_N_THREADS`` (FFmpeg decode threads): 4.7.

Without the timeouts, OpenCV's FFmpeg backend waits on a silent network stream for its
own fixed limit; edgeload's stall guard (below) cuts the stream's TCP connection after
the source's ``open_timeout_s`` / ``read_timeout_s`` instead, so the reader reconnects
and ``close()`` returns. Without the thread cap, FFmpeg picks its own decode thread
count.

**FFmpeg options for one capture open** (:func:`scoped_env`), without changing what
other captures get.  OpenCV's FFmpeg backend has no per-open parameter for demuxer
options such as ``rtsp_transport``: it reads them from ``OPENCV_FFMPEG_CAPTURE_OPTIONS``
(``key;value|key;value``) each time a capture opens, and only when that variable
is unset does it ask for TCP itself (``rtsp_flags=prefer_tcp``).  Setting the
variable once for the process, as edgeload used to, made every later RTSP capture
in the process, edgeload's and the user's, fall back to UDP.

So the options are set only around edgeload's own ``cv2.VideoCapture(...)`` call,
under one process-wide lock, and the previous value (or its absence) is put back
as soon as the call returns.  The lock keeps two edgeload opens from restoring
each other's values.  A capture the user opens in another thread during that
call may still read edgeload's options; they name TCP (what OpenCV itself
prefers) and a shorter probe, so such a capture gets no worse than OpenCV's
default.  Opens that need no option (files on OpenCV >= 4.8) skip the lock.

**The stall guard** (:class:`StallGuard`): network timeouts for an OpenCV that cannot
pass them to FFmpeg.  Below OpenCV 4.5.4 a ``cv2.VideoCapture`` open or read on a camera
that accepted the connection and went silent blocks inside FFmpeg, beyond the reach of
Python, for as long as OpenCV's own fixed limit. The reader cannot check its stop flag
meanwhile, so neither a reconnect nor ``close()`` happens. The guard is one thread per
such stream: when the reader has been inside one open or read for longer than the
source's timeout, it shuts down this process's TCP connections to the stream's address.
FFmpeg's blocked call then sees the connection end and returns at once, and the reader
reconnects (or stops, when asked to).

Two sources on the same camera address share its connections' fate: both reconnect.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Tuple
from urllib.parse import urlsplit

import psutil

from .._deps import require_cv2
from ..errors import SourceError, redact
from ..pipeline._lifecycle import POLL_INTERVAL_S, scoped_environ
from ..vocabulary import DecodeBackend, DecodeBackendSetting
from ._gstreamer import (
    LIVE_SINK,
    TO_BGR,
    Elements,
    Output,
    StreamInfo,
    csi_pipeline,
    decode_pipeline,
    device_pipeline,
    discover,
    has_element,
    libcamera_pipeline,
    list_pi_cameras,
    pi_camera_output,
)
from ._v4l2 import (
    CameraMode,
    CameraRequest,
    choose_mode,
    fourcc_text,
    list_modes,
    requested_mode,
)

SourceKind = Literal["file", "rtsp", "http", "stream", "device", "csi", "pipeline"]
Backend = Literal["gstreamer", "ffmpeg", "any", "picamera2"]
RtspTransport = Literal["tcp", "udp"]
LIVE_KINDS: tuple[SourceKind, ...] = ("rtsp", "http", "stream", "device", "csi", "pipeline")
# A file whose frames have at most this many pixels decodes with one FFmpeg thread,
# whatever the plan gives files.  At 320x240 a frame decodes in well under a
# millisecond: a second frame thread only adds GIL hand-offs and wake-ups (+14-25 %
# CPU per frame over one thread; 4 x 720p gains from two).  Twice 320x240's pixels
# (352x288 and 480x320 too; not 640x360, where one thread loses with a 640x640
# output) - docs/performance.md, "Small files".
SMALL_FILE_PIXELS = 2 * 320 * 240
NETWORK_KINDS: tuple[SourceKind, ...] = ("rtsp", "http", "stream")
# Network streams edgeload's GStreamer pipelines have no route for: OpenCV's FFmpeg
# opens them (kind "stream").
STREAM_SCHEMES = ("rtmp", "rtmps", "udp", "srt", "tcp", "rtp")
# An http(s) URL whose path ends so is a recorded file: read to its end, every frame.
RECORDED_SUFFIXES = (".mp4", ".m4v", ".mov", ".mkv", ".webm", ".ts", ".mts", ".avi")


def recorded_url(url: str) -> bool:
    """Whether the http(s) ``url`` names a recorded file (by its path's ending)."""
    return urlsplit(url).path.lower().endswith(RECORDED_SUFFIXES)


PIPELINE_PREFIX = "gst:"
"""A source string that starts with this is a GStreamer pipeline (the rest of it)."""
_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")


@dataclass(frozen=True)
class Target:
    """What OpenCV opens for one source."""

    kind: SourceKind
    backend: Backend
    open_string: str
    """The path, URL or GStreamer pipeline passed to ``cv2.VideoCapture``."""
    index: int | None = None
    """The camera index for ``kind == "device"`` opened by index, and a Pi camera read
    through picamera2 (backend ``picamera2``)."""
    rtsp_transport: RtspTransport | None = None
    """RTSP only: ``tcp`` or ``udp`` as the source asked; None: TCP unless the
    ``OPENCV_FFMPEG_CAPTURE_OPTIONS`` environment variable names another."""
    yuv: str = ""
    """GStreamer decode pipelines: ``I420``/``NV12`` when frames arrive as one YUV plane,
    at the target size where the pipeline scaled them, else as decoded (the frame writer
    scales and converts them); '' for BGR."""
    codec: str = ""
    """The stream's codec as found (``h264``, ``h265``, ``mjpeg``, ...); '' unknown."""
    container: str = ""
    """``mp4``, ``mkv``, ``ts``, ``avi``, ``rtp``; '' unknown."""
    pending: bool = False
    """An RTSP pipeline whose codec is found when the reader opens it (:func:`resolve`)."""
    location: str = ""
    board: str = ""
    output: Output | None = None
    source_size: tuple[int, int] | None = None
    """The decoded picture's ``(width, height)`` as found before opening; with ``yuv``
    the pipeline may scale it, so the frame writer maps boxes from this size."""
    camera_mode: CameraMode | None = None
    """A USB camera: the mode asked of it (the closest it lists to the request)."""

    @property
    def live(self) -> bool:
        """Whether frames arrive in real time (cameras, network streams, pipelines)."""
        return self.kind in LIVE_KINDS


def classify(uri: object) -> tuple[SourceKind, str | int]:
    """Say what kind of input ``uri`` is, checking what can be checked without opening it.

    Args:
        uri: a file path, ``rtsp://``/``http(s)://`` URL, camera index, ``/dev/videoN``,
            ``csi://N`` or a GStreamer pipeline written after a ``gst:`` prefix.  Only
            that prefix makes a pipeline: any other string is a path or URL, whatever
            characters (``!``, quotes, spaces) it holds.

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
    raw = os.fspath(uri)  # type: ignore[arg-type]
    # A file name may end in a space; a URL or pipeline read from a config file may not.
    text = raw if Path(raw).is_file() else raw.strip()
    if text.startswith(PIPELINE_PREFIX):
        # The one way to a pipeline: a path or URL from a config file with a '!' in it
        # must never become elements nobody wrote.
        pipeline = text[len(PIPELINE_PREFIX) :].strip()
        _check_pipeline(pipeline, source=uri)
        return "pipeline", pipeline
    scheme = _SCHEME.match(text)
    if scheme:
        name = scheme.group(1).lower()
        if name in ("rtsp", "rtsps"):
            return "rtsp", text
        if name in ("http", "https"):
            return "http", text
        if name in STREAM_SCHEMES:
            return "stream", text
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
                "rtsp://, http(s)://, rtmp://, udp://, srt://, csi://N, /dev/videoN, a "
                "camera index or a GStreamer pipeline after 'gst:'",
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


def _check_pipeline(text: str, *, source: object) -> None:
    parts = [p.strip() for p in text.split("!")]
    if any(not p for p in parts) or text.count('"') % 2:
        raise SourceError(
            f"GStreamer pipeline {text!r} is malformed (an empty element between '!' or an "
            "unclosed quote); test it with gst-launch-1.0 first",
            source=source,
        )
    if not re.match(r"^[A-Za-z]", parts[0]) or "appsink" not in parts[-1]:
        raise SourceError(
            f"GStreamer pipeline {text!r} must start with a source element and end in "
            f"an appsink for OpenCV, e.g. '... ! {TO_BGR} ! {LIVE_SINK}'",
            source=source,
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
    output: Output | None = None,
    info: StreamInfo | None = None,
    elements: Elements = has_element,
    camera: CameraRequest | None = None,
    modes: Sequence[CameraMode] | None = None,
    pi_cameras: Callable[[], list[str] | None] = list_pi_cameras,
    picamera2: bool | None = None,
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
        output: the size, resize mode and fps the loader wants (GStreamer pipelines
            scale to it); None: the stream's own size.
        info: the stream's codec and container; None finds them (files now, RTSP when
            the reader opens it: :func:`resolve`).
        elements: whether this GStreamer has an element (tests pass a board's list).
        camera: a USB camera's requested size, rate and format.
        modes: the camera's modes; None lists them (``v4l2-ctl``) when ``camera`` asks.
        pi_cameras: lists a Raspberry Pi's libcamera camera ids (``cam -l``) for
            ``csi://N`` on a Pi; None from it: they cannot be listed here.
        picamera2: whether picamera2 is installed; None looks (``csi://N`` on a Pi).

    Raises:
        SourceError: the source needs GStreamer and this OpenCV has none (a Pi camera:
            nor picamera2), its codec has no decoder here, or the camera has no mode of
            the requested format.
    """
    want = preferred if backend == "auto" else backend
    if kind == "stream":
        if backend == "gstreamer":
            raise SourceError(
                f"video source {value!r}: edgeload has no GStreamer pipeline for "
                f"{str(value).partition(':')[0]}:// streams; leave backend='auto' (OpenCV's "
                "FFmpeg opens it) or write the pipeline yourself after 'gst:'",
                source=value,
            )
        return Target(kind, "ffmpeg", str(value))
    needs_gst = kind in ("csi", "pipeline")
    if gstreamer is None and (needs_gst or want == "gstreamer"):
        gstreamer = opencv_has("gstreamer")
    if kind == "csi" and decoder in ("rpi4", "rpi5"):
        return _pi_camera_target(int(value), board=decoder, backend=backend, output=output,
                                 gstreamer=bool(gstreamer), elements=elements,
                                 pi_cameras=pi_cameras, picamera2=picamera2)  # fmt: skip
    if (needs_gst or want == "gstreamer") and not gstreamer:
        if needs_gst or backend == "gstreamer":
            from ..platform.plan import gstreamer_opencv_fix

            pi = decoder in ("rpi4", "rpi5")
            fix = gstreamer_opencv_fix("raspberry_pi" if pi else "jetson")
            shown = f"csi://{value}" if kind == "csi" else value
            raise SourceError(
                f"video source {shown!r} needs OpenCV with GStreamer, and this OpenCV has "
                f"none; on a {'Raspberry Pi' if pi else 'Jetson'}, {fix}; elsewhere pass "
                "a file or URL and backend='ffmpeg'",
                source=value,
            )
        want = "ffmpeg"
    if kind == "pipeline":
        return Target(kind, "gstreamer", str(value))
    if kind == "csi":
        pipeline, yuv = csi_pipeline(int(value), output or Output())
        return Target(kind, "gstreamer", pipeline, yuv=yuv, board=decoder, output=output)
    if kind == "device":
        dev = value if isinstance(value, str) else f"/dev/video{value}"
        mode = None
        if camera is not None and not camera.empty:
            listed = list_modes(dev) if modes is None else modes
            if listed and choose_mode(listed, camera) is None:
                have = ", ".join(sorted({m.fourcc for m in listed}))
                raise SourceError(
                    f"video source {value!r}: the camera has no {camera.fourcc or 'MJPG or YUYV'} "
                    f"mode (its formats: {have}); pass fourcc=None, or write the pipeline "
                    "after 'gst:'",
                    source=value,
                )
            mode = requested_mode(camera, listed)
        size = (mode.width, mode.height) if mode is not None and mode.width else None
        if want == "gstreamer":
            pipeline, yuv = device_pipeline(dev, mode, board=decoder, out=output,
                                            elements=elements)  # fmt: skip
            return Target(kind, "gstreamer", pipeline, yuv=yuv, board=decoder,
                          output=output if yuv else None, source_size=size,
                          camera_mode=mode)  # fmt: skip
        index = value if isinstance(value, int) else int(str(value)[len("/dev/video") :])
        return Target(kind, "any", str(value), index=index, camera_mode=mode)
    transport = rtsp_transport if kind == "rtsp" else None
    if want == "ffmpeg":
        return Target(kind, "ffmpeg", str(value), rtsp_transport=transport)
    location, out = str(value), output or Output()
    pending = kind == "rtsp" and info is None
    if info is None:
        # A file is read here and now; a camera may be down: RTSP is found at open.
        info = discover(kind, location, timeout_s=10.0) if kind == "file" else StreamInfo()
    if kind == "rtsp":
        info = dataclasses.replace(info, container="rtp")
    pipeline, yuv = decode_pipeline(kind, location, decoder, transport=transport or "tcp",
                                    recorded=kind == "http" and recorded_url(location),
                                    info=info, out=out, elements=elements)  # fmt: skip
    return Target(kind, "gstreamer", pipeline, rtsp_transport=transport, yuv=yuv,
                  codec=info.codec, container=info.container, pending=pending,
                  location=location, board=decoder, output=out,
                  source_size=_picture_size(info))  # fmt: skip


def _pi_camera_target(
    index: int,
    *,
    board: str,
    backend: DecodeBackendSetting,
    output: Output | None,
    gstreamer: bool,
    elements: Elements,
    pi_cameras: Callable[[], list[str] | None],
    picamera2: bool | None,
) -> Target:
    """``csi://N`` on a Raspberry Pi: libcamera's GStreamer element where OpenCV has
    GStreamer and the element is installed, else picamera2 (Pi OS installs it, not the
    element) unless ``backend='gstreamer'``; else a SourceError naming what to install."""
    source = f"csi://{index}"
    if gstreamer and elements("libcamerasrc"):
        pipeline, yuv = libcamera_pipeline(index, output or Output(), cameras=pi_cameras())
        return Target("csi", "gstreamer", pipeline, yuv=yuv, board=board, output=output)
    from ._picamera2 import describe, installed

    if backend != "gstreamer" and (installed() if picamera2 is None else picamera2):
        out = output or Output()
        size, fps = pi_camera_output(out)
        return Target("csi", "picamera2", describe(index, size, fps), index=index,
                      board=board, output=out)  # fmt: skip
    if gstreamer:
        missing, fix = "libcamera's GStreamer element", "sudo apt install gstreamer1.0-libcamera"
    else:
        from ..platform.plan import gstreamer_opencv_fix

        missing, fix = "an OpenCV with GStreamer", gstreamer_opencv_fix("raspberry_pi")
    if backend == "gstreamer":
        raise SourceError(
            f"video source {source!r} with backend='gstreamer' needs {missing}: {fix}; or "
            "leave backend='auto' to read it through picamera2",
            source=source,
        )
    venv = "a venv sees it when made with --system-site-packages"
    if gstreamer:
        raise SourceError(
            f"video source {source!r}: a Raspberry Pi camera is read through libcamera's "
            f"GStreamer element (libcamerasrc) or picamera2, and neither is installed: {fix}, "
            f"or python3-picamera2 ({venv})",
            source=source,
        )
    raise SourceError(
        f"video source {source!r}: a Raspberry Pi camera is read through picamera2 or "
        f"{missing}, and this Python has neither: sudo apt install python3-picamera2 "
        f"({venv}), or {fix}",
        source=source,
    )


def resolve(target: Target, *, timeout_s: float, elements: Elements = has_element) -> Target:
    """``target`` with its pipeline built for the codec the stream carries (RTSP through
    GStreamer, at each open); unchanged when the stream cannot be asked now.

    Raises:
        SourceError: the codec has no decoder here (opening again would not help).
    """
    if not target.pending:
        return target
    info = discover(target.kind, target.location, timeout_s=timeout_s)
    if not info.codec:
        return target  # down, or nothing could tell: decodebin tries, the retry asks again
    pipeline, yuv = decode_pipeline(
        target.kind, target.location, target.board, transport=target.rtsp_transport or "tcp",
        info=info, out=target.output or Output(), elements=elements,
    )  # fmt: skip
    return dataclasses.replace(target, open_string=pipeline, yuv=yuv, codec=info.codec,
                               pending=False, source_size=_picture_size(info))  # fmt: skip


def _picture_size(info: StreamInfo) -> tuple[int, int] | None:
    return (info.width, info.height) if info.width and info.height else None


def open_capture(
    target: Target, *, open_timeout_s: float, read_timeout_s: float, ffmpeg_threads: int
) -> Any:
    """Open ``target`` and return the ``cv2.VideoCapture``, or None when it does not open.

    FFmpeg opens take OpenCV's global lock, so network opens carry an open timeout:
    a camera that accepts and never answers holds the lock for at most that long.
    RTSP goes over TCP unless the target asks for UDP.
    """
    if target.backend == "picamera2":
        from ._picamera2 import open_camera

        size, fps = pi_camera_output(target.output or Output())
        return open_camera(target.index or 0, size, fps, read_timeout_s=read_timeout_s)
    cv2 = require_cv2()
    features = capture_features()  # what this OpenCV lacks: see the module docstring
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
    # Set only for this open and put back after it: see the module docstring.
    with scoped_env(env):
        try:
            cap = cv2.VideoCapture(where, api[target.backend], params)
        except (TypeError, cv2.error):
            cap = cv2.VideoCapture(where, api[target.backend])
    if not cap.isOpened():
        cap.release()
        return None
    mode = target.camera_mode
    if mode is not None and target.backend == "any":
        # V4L2 applies a format only before streaming starts: fourcc first, as the size
        # and rates a camera offers depend on it.
        if mode.fourcc:
            cap.set(cv2.CAP_PROP_FOURCC, cv2.VideoWriter_fourcc(*mode.fourcc))
        if mode.width and mode.height:
            cap.set(cv2.CAP_PROP_FRAME_WIDTH, mode.width)
            cap.set(cv2.CAP_PROP_FRAME_HEIGHT, mode.height)
        if mode.fps:
            cap.set(cv2.CAP_PROP_FPS, mode.fps)
    return cap


def opened_mode(cap: Any) -> CameraMode:
    """The mode a camera capture runs in, as OpenCV reads it back."""
    cv2 = require_cv2()
    return CameraMode(
        fourcc_text(cap.get(cv2.CAP_PROP_FOURCC)),
        int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)),
        int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT)),
        round(float(cap.get(cv2.CAP_PROP_FPS)), 3),
    )


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


STALL_GUARD_VAR = "EDGELOAD_STALL_GUARD"


@dataclass(frozen=True)
class CaptureFeatures:
    """The capture controls this OpenCV has."""

    version: tuple[int, int, int]
    params: bool
    """``VideoCapture(source, api, params)`` is accepted (4.5.2+)."""
    open_timeout: bool
    """``CAP_PROP_OPEN_TIMEOUT_MSEC`` exists and can be passed (4.5.4+)."""
    read_timeout: bool
    """``CAP_PROP_READ_TIMEOUT_MSEC`` exists and can be passed (4.5.4+)."""
    n_threads: bool
    """``CAP_PROP_N_THREADS`` exists and can be passed (4.7+)."""

    @property
    def timeouts(self) -> bool:
        """Both network timeouts reach FFmpeg."""
        return self.open_timeout and self.read_timeout


def parse_version(text: str) -> tuple[int, int, int]:
    """``"4.5.1"``, ``"4.10.0-dev"`` -> (4, 5, 1), (4, 10, 0); unknown parts are 0."""
    parts = [int(p) for p in re.findall(r"\d+", text)[:3]]
    parts += [0] * (3 - len(parts))
    return parts[0], parts[1], parts[2]


def features_of(cv2: Any) -> CaptureFeatures:
    """Read the features off a cv2 module (the installed one, or another for tests)."""
    version = parse_version(str(getattr(cv2, "__version__", "0")))
    params = version >= (4, 5, 2)
    return CaptureFeatures(
        version=version,
        params=params,
        open_timeout=params and hasattr(cv2, "CAP_PROP_OPEN_TIMEOUT_MSEC"),
        read_timeout=params and hasattr(cv2, "CAP_PROP_READ_TIMEOUT_MSEC"),
        n_threads=params and hasattr(cv2, "CAP_PROP_N_THREADS"),
    )


@functools.lru_cache(maxsize=1)
def _installed() -> CaptureFeatures:
    return features_of(require_cv2())


def capture_features() -> CaptureFeatures:
    """The installed OpenCV's capture features.

    ``EDGELOAD_STALL_GUARD=1`` makes edgeload act as on an OpenCV without the timeouts
    (the stall guard instead): for an OpenCV whose timeouts misbehave, and for testing
    the guard on a new OpenCV.
    """
    found = _installed()
    if os.environ.get(STALL_GUARD_VAR) == "1":
        found = dataclasses.replace(found, open_timeout=False, read_timeout=False)
    return found


def capture_fallbacks(features: CaptureFeatures | None = None) -> list[tuple[str, str]]:
    """What this OpenCV lacks for capture, each with what edgeload does instead."""
    f = capture_features() if features is None else features
    found = []
    if not f.params:
        found.append(
            (
                "OpenCV has no VideoCapture params list (4.5.2+)",
                "captures open with the backend only; no per-capture properties",
            )
        )
    if not f.timeouts:
        found.append(
            (
                "OpenCV has no FFmpeg open/read timeouts (CAP_PROP_*_TIMEOUT_MSEC, 4.5.4+)",
                "the stall guard cuts a silent network stream's connection after "
                "open_timeout_s / read_timeout_s, then the reader reconnects",
            )
        )
    if not f.n_threads:
        found.append(
            (
                "OpenCV has no FFmpeg decode thread cap (CAP_PROP_N_THREADS, 4.7+)",
                "FFmpeg picks its own decode thread count; the plan's stream count "
                "and worker caps bound the load",
            )
        )
    return found


OPTIONS_VAR = "OPENCV_FFMPEG_CAPTURE_OPTIONS"
THREADS_VAR = "OPENCV_FFMPEG_THREADS"
# FFmpeg probes a live stream for 5 s by default to estimate its frame rate; 1 s is
# plenty for the codec parameters.
_PROBE_US = 1_000_000

_env_lock = threading.Lock()


def network_options(rtsp_transport: str | None) -> str:
    """The ``OPENCV_FFMPEG_CAPTURE_OPTIONS`` value for one network open.

    Precedence, lowest first: edgeload's defaults (TCP, a 1 s probe), then what the
    user put in the environment, then the source's own ``rtsp_transport``.  OpenCV
    applies the pairs in order, so a later key replaces an earlier one.
    """
    pairs = ["rtsp_transport;tcp", f"analyzeduration;{_PROBE_US}"]
    user = os.environ.get(OPTIONS_VAR, "").strip()
    if user:
        pairs.append(user)
    if rtsp_transport is not None:
        pairs.append(f"rtsp_transport;{rtsp_transport}")
    return "|".join(pairs)


def rtsp_transport_used(rtsp_transport: str | None) -> str:
    """The transport an RTSP open will ask for, after the precedence above."""
    chosen = "tcp"
    for pair in network_options(rtsp_transport).split("|"):
        key, _, value = pair.partition(";")
        if key.strip() == "rtsp_transport":
            chosen = value.strip()
    return chosen


@contextlib.contextmanager
def scoped_env(values: dict[str, str]) -> Iterator[None]:
    """Set ``values`` in the environment for the block, then restore what was there."""
    if not values:
        yield
        return
    with _env_lock, scoped_environ(values):
        yield


_log = logging.getLogger("edgeload")
_DEFAULT_PORTS = {"rtsp": 554, "rtsps": 322, "http": 80, "https": 443}

Address = Tuple[str, int]
_RECUT_S = 0.5  # while a cut call is still blocked, cut again this often


def remote_addresses(url: str) -> set[Address]:
    """The (ip, port) pairs ``url``'s host resolves to; empty when it does not resolve."""
    parts = urlsplit(url)
    host = parts.hostname
    if not host:
        return set()
    try:
        port = parts.port or _DEFAULT_PORTS.get(parts.scheme.lower(), 80)
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, ValueError):
        return set()
    return {(str(info[4][0]), int(info[4][1])) for info in infos}


def cut_connections(addresses: set[Address]) -> int:
    """Shut down this process's TCP connections to ``addresses``; return how many."""
    proc = psutil.Process()
    # psutil 6 renamed connections() (which now warns) to net_connections()
    list_connections = getattr(proc, "net_connections", None) or proc.connections
    try:
        connections = list_connections(kind="tcp")
    except psutil.Error:
        return 0
    cut = 0
    for conn in connections:
        if conn.fd < 0 or not conn.raddr or (conn.raddr[0], conn.raddr[1]) not in addresses:
            continue
        try:
            # a duplicate of FFmpeg's descriptor: shutdown acts on the shared connection,
            # and closing the duplicate leaves FFmpeg's own descriptor to FFmpeg
            with socket.socket(fileno=os.dup(conn.fd)) as sock:
                sock.shutdown(socket.SHUT_RDWR)
            cut += 1
        except OSError:
            continue  # closed meanwhile
    return cut


class StallGuard:
    """Cuts a stream's connection when its reader stays blocked in OpenCV too long.

    The reader calls :meth:`enter` before each open or read with that call's timeout and
    :meth:`leave` after it. ``stop()`` also cuts at once when the reader is blocked, so
    closing a loader does not wait for a silent camera.
    """

    def __init__(self, url: str, *, name: str) -> None:
        self._url = url
        self._addresses: set[Address] = set()
        self._lock = threading.Lock()
        self._deadline: float | None = None
        self._stop = threading.Event()
        self.cuts = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        """Resolve the stream's address (in the reader's thread) and start watching."""
        self._addresses = remote_addresses(self._url)
        self._thread.start()

    def enter(self, timeout_s: float) -> None:
        """The reader is about to block in OpenCV for at most ``timeout_s``."""
        with self._lock:
            self._deadline = time.monotonic() + timeout_s

    def leave(self) -> None:
        """The reader's call returned."""
        with self._lock:
            self._deadline = None

    def _blocked(self) -> bool:
        with self._lock:
            return self._deadline is not None

    def stop(self) -> None:
        """Stop watching; a reader blocked right now is released at once (and cut again
        each poll until its call returns)."""
        self._stop.set()
        if self._blocked():
            self._cut("the stream is closing")

    def join(self, timeout_s: float) -> bool:
        """Wait for the guard thread; return whether it has ended."""
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _run(self) -> None:
        # After stop() the thread stays while the reader is still blocked, cutting each
        # poll: FFmpeg may open a new connection inside the same call (HTTP does).
        while True:
            stopping = self._stop.wait(POLL_INTERVAL_S)
            with self._lock:
                now = time.monotonic()
                blocked = self._deadline is not None
                late = blocked and (stopping or now > (self._deadline or now))
                if late and not stopping:
                    self._deadline = now + _RECUT_S  # while still blocked, cut again
            if stopping and not blocked:
                return
            if late:
                self._cut("the stream is closing" if stopping else "no answer within the timeout")

    def _cut(self, why: str) -> None:
        n = cut_connections(self._addresses)
        self.cuts += n
        if n:
            _log.info(
                "edgeload: %s: %s; cut %d connection(s) to free the reader",
                redact(self._url),
                why,
                n,
            )


class GuardedCapture:
    """A ``cv2.VideoCapture`` whose blocking reads are watched by a :class:`StallGuard`."""

    def __init__(self, cap: Any, guard: StallGuard, read_timeout_s: float) -> None:
        self._cap = cap
        self._guard = guard
        self._timeout_s = read_timeout_s

    def grab(self) -> bool:
        self._guard.enter(self._timeout_s)
        try:
            return bool(self._cap.grab())
        finally:
            self._guard.leave()

    def read(self, *args: Any, **kwargs: Any) -> Any:
        self._guard.enter(self._timeout_s)
        try:
            return self._cap.read(*args, **kwargs)
        finally:
            self._guard.leave()

    def __getattr__(self, name: str) -> Any:  # retrieve, get, set, release, isOpened
        return getattr(self._cap, name)


def guard_for(target: Target, *, name: str) -> StallGuard | None:
    """A stall guard for ``target`` when this OpenCV cannot time out its network reads."""
    if target.backend != "ffmpeg" or target.kind not in NETWORK_KINDS:
        return None
    if capture_features().timeouts:
        return None
    return StallGuard(target.open_string, name=name)
