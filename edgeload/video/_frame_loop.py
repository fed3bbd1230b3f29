"""The grab/convert loop: frames from one open capture into the reader's sink.

Each frame is grabbed; only those that will be used are retrieved (decoded to BGR,
into the same buffer every frame: ``cap.retrieve(image=buf)``).  Frames the ``fps``
limit does not want, the backlog a fresh connection hands over
(:class:`~edgeload.video.clock.LiveEdge`), ``latest`` frames no batch will ship
(:mod:`edgeload.video.demand`) and the frames a realtime replay fell behind on are
grabbed and never retrieved, so they cost no colour conversion, copy or resize.
Where no such rule applies (a file read without an ``fps`` limit or demand) every
frame is converted, and one ``cap.read(image=buf)`` does both: one native call, so
one release and re-take of the GIL per frame instead of two (at 320x240 the loader's
per-frame Python is 12-17 % of its CPU: ``docs/performance.md``).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

import numpy as np

from .._deps import require_cv2
from ._playhead import Playhead
from .clock import AgeOrigin, CaptureClock, LiveEdge
from .source import VideoSource

# A sink takes the decoded BGR frame (only valid during the call) and its seq, pts_ms
# and captured_at (as :class:`~edgeload.video.source.FrameInfo` names them: plain
# values, no object made per frame), and returns False when the reader should stop.
Sink = Callable[[np.ndarray, int, float, float], bool]
# Asked after each grab with (grabbed_at, frame interval): convert this frame?
Wants = Callable[[float, float], bool]


class FpsLimit:
    """Which grabbed frames a source's ``fps`` limit keeps."""

    def __init__(self, fps: float, *, by_index: bool) -> None:
        self._fps = fps
        # Files read faster than real time keep frames by index, not by the clock.
        self._by_index = by_index
        self._next_wanted = 0.0

    def reset(self, now: float) -> None:
        """A new connection: the next frame is wanted from ``now``."""
        self._next_wanted = now

    def keeps(self, seq: int, now: float, rate: float) -> bool:
        """Whether frame ``seq``, grabbed at ``now`` from a ``rate`` fps source, is kept."""
        if self._by_index:
            step = rate / self._fps
            return step <= 1 or seq == 0 or int(seq / step) != int((seq - 1) / step)
        # Half a source frame of slack: frame arrival jitters around the wanted time.
        if now < self._next_wanted - 0.5 / rate:
            return False
        self._next_wanted = max(self._next_wanted, now - 1.0 / self._fps) + 1.0 / self._fps
        return True


class FrameLoop:
    """Reads frames from each capture the connection opens, and counts what it did.

    Where the reader is in the stream (frame numbers, the realtime schedule, the
    file's end) is its :class:`~edgeload.video._playhead.Playhead`, ``playhead``.

    Args:
        source: what is read.
        sink: receives each converted frame; see :data:`Sink`.
        wants: asked after each grab whether to convert the frame; None: all.
        start_frame: files: the frame index to start at (resume).
        report: records the stream's latest error text.
    """

    def __init__(
        self,
        source: VideoSource,
        *,
        sink: Sink,
        wants: Wants | None,
        start_frame: int,
        report: Callable[[str], None],
    ) -> None:
        self.source = source
        self._sink, self._wants, self._report = sink, wants, report
        self.playhead = Playhead(source, start_frame=start_frame, report=report)
        self.frames = 0
        self.skipped = 0  # grabbed, not wanted by the fps limit
        self.backlog = 0  # frames a fresh connection handed over late, dropped
        self.unconverted = 0  # decoded, never converted: a newer frame would ship instead
        self.fps_reported = 0.0
        self.age_from: AgeOrigin = (
            "pts" if source.network else "schedule" if source.realtime else "grab"
        )
        self.last_frame_at: float | None = None
        self.streaming_since: float | None = None
        self.reconnect = threading.Event()  # the watchdog's lever
        by_index = source.kind == "file" and not source.realtime
        self._limit = FpsLimit(source.fps, by_index=by_index) if source.fps else None
        self._clock = CaptureClock()
        self._buf: np.ndarray | None = None
        self._pos_msec = 0  # cv2.CAP_PROP_POS_MSEC, looked up once a capture runs
        self._started_at = time.monotonic()

    def fps_measured(self) -> float:
        """Frames delivered per second since the reader started."""
        return self.frames / max(1e-9, time.monotonic() - self._started_at)

    def run(self, cap: Any, stop: threading.Event, streaming: Callable[[], None]) -> str:
        """Read ``cap`` until it ends; return ``stop``, ``ended``, ``failed`` or ``lost``.

        ``streaming`` is called once the capture is positioned and frames start.
        """
        cv2 = require_cv2()
        src, head = self.source, self.playhead
        self._pos_msec = cv2.CAP_PROP_POS_MSEC
        self.fps_reported = float(cap.get(cv2.CAP_PROP_FPS) or 0.0)
        head.start(cap, self.fps_reported)
        if self._limit is not None:
            self._limit.reset(time.monotonic())
        self.reconnect.clear()
        self.last_frame_at, self.streaming_since = None, time.monotonic()
        streaming()
        interval = 1.0 / head.rate
        edge = LiveEdge(interval, time.monotonic()) if src.kind != "file" else None
        convert_all = edge is None and self._limit is None and self._wants is None
        self._clock.reset()
        while not stop.is_set():
            if self.reconnect.is_set():
                self._report("no frame within the stall timeout: reconnecting")
                return "lost"
            if src.realtime and not head.keep_pace(cap, stop):
                return "stop"
            # Only the live edge asks when a grab started: no clock read a frame otherwise.
            grab_started = time.monotonic() if edge is not None else 0.0
            if convert_all and self._buf is not None:
                # Grab and convert at once; FFmpeg's conversion of a grabbed frame does
                # not fail, so False here is the end of the file, as for grab().
                ok, img = cap.read(image=self._buf)
                if ok:
                    now = time.monotonic()
                    self._buf = img  # a new array only when the resolution changed
                    if not self._hand_over(cap, img, head.advance(), now):
                        return "stop"
                    continue
            elif cap.grab():
                now = time.monotonic()
                seq = head.advance()
                if edge is not None and edge.is_backlog(grab_started, now):
                    self.backlog += 1
                elif self._limit is not None and not self._limit.keeps(seq, now, head.rate):
                    self.skipped += 1
                elif self._wants is not None and not self._wants(now, interval):
                    self.unconverted += 1
                elif not self._deliver(cap, seq, now):
                    return "stop"
                continue
            outcome = head.at_end(cap)
            if outcome != "loop":
                return outcome
        return "stop"

    def _deliver(self, cap: Any, seq: int, now: float) -> bool:
        """Convert the grabbed frame and hand it to the sink; False: the reader stops."""
        ok, img = cap.retrieve(image=self._buf) if self._buf is not None else cap.retrieve()
        if not ok or img is None:
            self._report(f"frame {seq} could not be decoded")
            return True
        if img is not self._buf:
            self._buf = img  # first frame, or the resolution changed: a new buffer
        return self._hand_over(cap, img, seq, now)

    def _hand_over(self, cap: Any, img: np.ndarray, seq: int, now: float) -> bool:
        """Give a converted frame, with its info, to the sink; False: the reader stops."""
        pts_ms = float(cap.get(self._pos_msec))
        # "grab" is _captured's last case, answered here: one Python call less a frame.
        captured = now if self.age_from == "grab" else self._captured(now, pts_ms)
        self.last_frame_at = now
        self.frames += 1
        return self._sink(img, seq, pts_ms, captured)

    def _captured(self, grabbed_at: float, pts_ms: float) -> float:
        """The frame's capture time, as ``age_from`` says (see :mod:`edgeload.video.clock`)."""
        if self.age_from == "pts":
            captured = self._clock.captured_at(grabbed_at, pts_ms)
            if not self._clock.timestamps:
                self.age_from = "grab"  # what the stats say follows what was measured
            return captured
        if self.age_from == "schedule":
            return self.playhead.due_of_last()
        return grabbed_at
