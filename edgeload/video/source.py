"""One video input: what it is, how to read it, and the states its stream goes through.

A :class:`VideoSource` is checked when it is made (a missing file, an unknown scheme
or a malformed pipeline is a :class:`~edgeload.errors.SourceError` right away) and
read later by a stream thread (``edgeload.video._reader``) that walks the states::

    connecting -> streaming -> reconnecting -> streaming ...
                           \\-> ended (file end)   \\-> failed (no more retries, bad file)

Live inputs (cameras, RTSP, HTTP, pipelines, and files replayed with
``realtime=True``) retry with jittered, capped exponential backoff; files do not.
"""

from __future__ import annotations

import enum
import os
import random
from dataclasses import dataclass
from typing import Literal, cast

from .. import _args
from ..errors import ArgumentError, SourceError, redact
from ..vocabulary import DecodeBackendSetting
from ._capture import NETWORK_KINDS, RtspTransport, SourceKind, classify, recorded_url
from ._v4l2 import FOURCCS, CameraRequest, Fourcc

Policy = Literal["latest", "every"]
_POLICIES = ("latest", "every")
_BACKENDS = ("auto", "gstreamer", "ffmpeg")
_TRANSPORTS = ("tcp", "udp")


class SourceState(str, enum.Enum):
    """Where a stream is in its life."""

    CONNECTING = "connecting"
    STREAMING = "streaming"
    RECONNECTING = "reconnecting"
    ENDED = "ended"
    FAILED = "failed"
    CLOSED = "closed"

    @property
    def done(self) -> bool:
        """Whether the stream delivers no more frames."""
        return self in (SourceState.ENDED, SourceState.FAILED, SourceState.CLOSED)


@dataclass(frozen=True)
class FrameInfo:
    """What a stream knows about one delivered frame."""

    seq: int
    """The source's own frame number; it counts skipped and dropped frames too."""
    pts_ms: float
    """Presentation time reported by the decoder, milliseconds."""
    captured_at: float
    """``time.monotonic()`` of the frame's capture, counted as the stream's
    ``age_from`` says (:mod:`edgeload.video._reader`): from its timestamps, its
    replay schedule, or when it was grabbed."""


class VideoSource:
    """One video input and how to read it.

    Args:
        uri: a file path, ``rtsp://`` or ``http(s)://`` URL, camera index, ``/dev/videoN``,
            ``csi://N`` (Jetson camera), or a GStreamer pipeline ending in an appsink
            written after a ``gst:`` prefix (``"gst:videotestsrc ! ... ! appsink"``).
            Only that prefix makes a pipeline: every other string is a path or URL,
            whatever characters it holds, and edgeload quotes it where it goes into a
            pipeline of its own.
        loop: files only: start again at the end instead of ending.
        realtime: files only: replay paced at the file's frame rate, like a camera
            (frames the reader falls behind on are skipped and counted as drops).
        fps: deliver at most this many frames per second; the others are grabbed and
            never decoded to pixels. None: every frame.
        policy: ``latest`` (drop the oldest, count drops) or ``every`` (back-pressure);
            None: ``latest`` for live inputs, ``every`` for files.
        backend: ``auto`` (the plan's choice), ``gstreamer`` or ``ffmpeg``.
        name: a label for stats; default the uri with its password hidden.
        open_timeout_s: network opens give up after this long (OpenCV's FFmpeg opens
            hold a global lock, so a silent camera must not hold it for long).
        read_timeout_s: a network read gives up after this long.
        stall_timeout_s: a live stream with no frame for this long reconnects.
        backoff_s: ``(first, cap)`` delays of the reconnect backoff, seconds.
        max_retries: failed opens in a row before a live stream is ``failed``;
            None retries forever.
        rtsp_transport: RTSP only: ``tcp`` or ``udp`` for the RTP packets.  None:
            TCP, unless ``OPENCV_FFMPEG_CAPTURE_OPTIONS`` in the environment names
            one.  UDP loses packets (smeared frames) on busy networks and does not
            pass most NATs; ask for it only for a camera that cannot do TCP.
        resolution: USB cameras (``/dev/videoN``, an index) only: ask the camera for
            the mode closest to ``(width, height)``, with ``fps`` as its frame rate.
            The mode is chosen from those the camera lists (``v4l2-ctl``; raw over MJPG
            where raw reaches the rate, MJPG where it cannot) and ``stats()`` shows the
            mode asked and the one opened.  None: the camera's current mode, and
            ``fps`` only limits delivery.
        fourcc: USB cameras only: ``MJPG`` or ``YUYV`` (None: whichever fits the
            request best).

    Attributes:
        uri: the input as given; only the code that opens it reads it.
        display: ``uri`` with a URL's password hidden (:func:`edgeload.errors.redact`):
            what messages, logs, ``stats()`` and ``repr()`` show.

    Raises:
        SourceError: the input cannot be used (named, with what to do instead).
        ArgumentError: an option is of the wrong type or out of range (a ValueError);
            the settings typed as ``Literal`` are accepted in any case.
    """

    def __init__(
        self,
        uri: str | int | os.PathLike[str],
        *,
        loop: bool = False,
        realtime: bool = False,
        fps: float | None = None,
        policy: Policy | None = None,
        backend: DecodeBackendSetting = "auto",
        name: str | None = None,
        open_timeout_s: float = 5.0,
        read_timeout_s: float = 5.0,
        stall_timeout_s: float = 5.0,
        backoff_s: tuple[float, float] = (0.5, 10.0),
        max_retries: int | None = None,
        rtsp_transport: RtspTransport | None = None,
        resolution: tuple[int, int] | None = None,
        fourcc: Fourcc | None = None,
    ) -> None:
        kind, value = classify(uri)  # SourceError for what is no source (None, 3.5)
        self.uri: str | int = os.fspath(uri) if isinstance(uri, os.PathLike) else uri
        # What messages, logs, stats() and repr() show: the URI with its password hidden.
        # Only the opening code reads ``uri`` itself.
        self.display = redact(self.uri)
        self.kind: SourceKind = kind
        self.value = value
        owner = f"video source {self.display!r}"
        loop = _args.flag(owner, "loop", loop)
        realtime = _args.flag(owner, "realtime", realtime)
        if (loop or realtime) and kind != "file":
            raise ArgumentError(f"{owner}: loop= and realtime= apply to files only")
        fps = _args.number(owner, "fps", fps, above=0, none_ok=True)
        policy = _args.choice(owner, "policy", policy, _POLICIES, none_ok=True)
        backend = _args.choice(owner, "backend", backend, _BACKENDS)
        rtsp_transport = _args.choice(
            owner, "rtsp_transport", rtsp_transport, _TRANSPORTS, none_ok=True
        )
        if rtsp_transport is not None and kind != "rtsp":
            raise ArgumentError(
                f"{owner}: rtsp_transport must be one of {_TRANSPORTS} "
                f"and given for rtsp:// sources only, got {rtsp_transport!r}"
            )
        if resolution is not None:
            resolution = _args.pair_of_ints(owner, "resolution", resolution, what="(width, height)")
        fourcc = _args.choice(owner, "fourcc", fourcc, FOURCCS, none_ok=True)
        if (resolution is not None or fourcc is not None) and kind != "device":
            raise ArgumentError(
                f"{owner}: resolution= and fourcc= apply to USB cameras (/dev/videoN or a "
                f"camera index) only; this source is {kind!r}: leave them out"
            )
        # Asked of the camera only with a size or format: fps alone limits delivery.
        self.camera: CameraRequest | None = (
            CameraRequest(resolution, fps, fourcc)
            if resolution is not None or fourcc is not None
            else None
        )
        if name is not None and (not isinstance(name, str) or not name):
            raise ArgumentError(f"{owner}: name must be a non-empty str or None, got {name!r}")
        self.open_timeout_s = _args.number(owner, "open_timeout_s", open_timeout_s, above=0)
        self.read_timeout_s = _args.number(owner, "read_timeout_s", read_timeout_s, above=0)
        self.stall_timeout_s = _args.number(owner, "stall_timeout_s", stall_timeout_s, above=0)
        self.backoff_s = _check_backoff(owner, backoff_s)
        self.max_retries = _args.integer(owner, "max_retries", max_retries, low=0, none_ok=True)
        self.loop = loop
        self.realtime = realtime
        self.fps = fps
        self.backend: DecodeBackendSetting = backend
        self.name: str = name or self.display
        self.rtsp_transport: RtspTransport | None = rtsp_transport
        # An http(s) URL to a recorded file (.mp4, .ts, ...) is read to its end, every
        # frame, like a file; it still opens over the network and retries.
        self.recorded = kind == "http" and recorded_url(str(value))
        self.policy: Policy = policy or ("latest" if self.live and not self.recorded else "every")

    @property
    def live(self) -> bool:
        """Whether frames arrive in real time: cameras, network, pipelines, realtime files."""
        return self.kind != "file" or self.realtime

    @property
    def network(self) -> bool:
        """Whether opening it goes over the network (and may hang)."""
        return self.kind in NETWORK_KINDS

    def backoff_delay(self, attempt: int) -> float:
        """The jittered delay before retry number ``attempt`` (0-based), seconds."""
        first, cap = self.backoff_s
        ceiling = min(cap, first * (2.0 ** min(attempt, 30)))
        # Half fixed, half random: retries of many cameras spread out, none waits 0.
        return ceiling / 2 + random.uniform(0, ceiling / 2)

    def __repr__(self) -> str:
        shown = self.display if isinstance(self.uri, str) else self.uri
        return f"VideoSource({shown!r}, kind={self.kind!r}, policy={self.policy!r})"


def _check_backoff(owner: str, backoff_s: object) -> tuple[float, float]:
    allowed = "a pair (first, cap) of finite seconds with 0 < first <= cap"
    if not isinstance(backoff_s, (tuple, list)) or len(backoff_s) != 2:
        raise ArgumentError(f"{owner}: backoff_s must be {allowed}, got {backoff_s!r}")
    first = cast(float, _args.number(owner, "backoff_s[0] (first)", backoff_s[0], above=0))
    cap = cast(float, _args.number(owner, "backoff_s[1] (cap)", backoff_s[1], above=0))
    if first > cap:
        raise ArgumentError(f"{owner}: backoff_s must be {allowed}, got {tuple(backoff_s)!r}")
    return first, cap


def as_source(source: VideoSource | str | int | os.PathLike[str]) -> VideoSource:
    """Wrap a plain string, path or index as a :class:`VideoSource` with its defaults.

    Raises:
        SourceError, ArgumentError: as :class:`VideoSource`.
    """
    if isinstance(source, VideoSource):
        return source
    if isinstance(source, (str, int, os.PathLike)) and not isinstance(source, bool):
        return VideoSource(source)
    raise SourceError(
        f"video source {redact(repr(source))}: expected a path, URL, camera index, pipeline or "
        f"edgeload.VideoSource, got {type(source).__name__}",
        source=source,
    )
