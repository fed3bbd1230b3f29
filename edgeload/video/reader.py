"""The thread that reads one :class:`~edgeload.video.source.VideoSource`.

It owns the capture and a per-stream decode buffer (``cap.retrieve(image=buf)``
decodes into the same array every frame), walks the source's state machine and hands
each frame to a sink, which resizes it into its place in a batch slot.  Frames the
``fps`` limit does not want, the backlog a fresh connection hands over
(:class:`~edgeload.video.clock.LiveEdge`) and ``latest`` frames no batch will ship
(:mod:`edgeload.video.demand`) are grabbed and never retrieved, so they cost no
colour conversion, copy or resize.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any, Callable

import numpy as np

from .._deps import require_cv2
from ._cutoff import GuardedCapture, guard_for
from .capture import Target, open_capture
from .clock import AgeOrigin, CaptureClock, LiveEdge
from .source import FrameInfo, SourceState, VideoSource

_log = logging.getLogger("edgeload")

# A sink takes the decoded BGR frame (only valid during the call) and its info, and
# returns False when the reader should stop.
Sink = Callable[[np.ndarray, FrameInfo], bool]
# Asked after each grab with (grabbed_at, frame interval): convert this frame?
Wants = Callable[[float, float], bool]

# A declared frame count this far beyond where reading stopped means truncation.
_TRUNCATION_SLACK_FRAMES = 2
# A realtime replay this many frames behind skips ahead rather than catching up.
_MAX_CATCH_UP_FRAMES = 300


class StreamReader:
    """Reads one source in its own thread, through its state machine, into a sink.

    Args:
        source: what to read.
        target: how to open it (from :func:`~edgeload.video.capture.build_target`).
        stream_id: the stream's number in its loader (names the thread).
        sink: receives each frame; see :data:`Sink`.
        ffmpeg_threads: FFmpeg decode threads for this stream.
        start_frame: files: the frame index to start at (resume).
        gate: events to wait for before opening (local sources open before network
            ones), at most twice the open timeout in all.
        wants: asked after each grab whether to convert the frame (``latest``
            streams of a loader: see :mod:`edgeload.video.demand`); None: all.
    """

    def __init__(
        self,
        source: VideoSource,
        target: Target,
        *,
        stream_id: int,
        sink: Sink,
        ffmpeg_threads: int = 1,
        start_frame: int = 0,
        gate: list[threading.Event] | None = None,
        wants: Wants | None = None,
    ) -> None:
        self.source = source
        self.target = target
        self.stream_id = stream_id
        self._sink = sink
        self._ffmpeg_threads = ffmpeg_threads
        self._gate = gate
        self._wants = wants
        self._stop = threading.Event()
        self._reconnect = threading.Event()
        self.state = SourceState.CONNECTING
        self.position = start_frame  # next frame index in the file
        self.opened = threading.Event()  # first open attempt finished (either way)
        self.seq = start_frame
        self._next_wanted = 0.0
        self.frames = 0
        self.skipped = 0  # grabbed, not wanted by the fps limit
        self.late = 0  # realtime replay frames skipped because the reader was behind
        self.backlog = 0  # frames a fresh connection handed over late, dropped
        self.unconverted = 0  # decoded, never converted: a newer frame would ship instead
        self.age_from: AgeOrigin = (
            "pts" if source.network else "schedule" if source.realtime else "grab"
        )
        self._clock = CaptureClock()
        self.reconnects = 0
        self.attempts = 0
        self.last_error: str | None = None
        self.last_frame_at: float | None = None
        self.streaming_since: float | None = None
        self.retry_at: float | None = None
        self.fps_reported = 0.0
        self._started_at = time.monotonic()
        self._buf: np.ndarray | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"edgeload-video-{stream_id}", daemon=True
        )
        # Only where OpenCV cannot time out network opens and reads (before 4.5.4)
        self._guard = guard_for(target, name=f"edgeload-video-{stream_id}-guard")

    def start(self) -> None:
        """Start the reader thread."""
        self._thread.start()

    @property
    def thread(self) -> threading.Thread:
        """The reader thread (``edgeload-video-N``)."""
        return self._thread

    def stop(self) -> None:
        """Ask the thread to stop; it notices within one read (or read timeout)."""
        self._stop.set()
        if self._guard is not None:
            self._guard.stop()  # frees a read blocked on a silent camera

    def join(self, timeout_s: float) -> bool:
        """Wait for the thread; return whether it has ended."""
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def request_reconnect(self) -> None:
        """Drop the connection and open again (the watchdog's lever)."""
        self._reconnect.set()

    def fps_measured(self) -> float:
        """Frames delivered per second since the reader started."""
        return self.frames / max(1e-9, time.monotonic() - self._started_at)

    def _run(self) -> None:
        guard = self._guard
        if guard is None:
            self._read_loop()
            return
        guard.start()
        try:
            self._read_loop()
        finally:
            guard.stop()
            if not guard.join(1.0):
                _log.warning("edgeload: stall guard of stream %d did not stop", self.stream_id)

    @contextlib.contextmanager
    def _blocking(self, timeout_s: float) -> Iterator[None]:
        """Tell the stall guard (if any) that an OpenCV call may now block."""
        if self._guard is None:
            yield
            return
        self._guard.enter(timeout_s)
        try:
            yield
        finally:
            self._guard.leave()

    def _read_loop(self) -> None:
        until = time.monotonic() + self.source.open_timeout_s * 2
        for event in self._gate or ():
            event.wait(max(0.0, until - time.monotonic()))
        ever_streamed = False
        failures = 0
        while not self._stop.is_set():
            self.state = SourceState.RECONNECTING if ever_streamed else SourceState.CONNECTING
            self.attempts += 1
            started = time.monotonic()
            try:
                with self._blocking(self.source.open_timeout_s):
                    cap = open_capture(
                        self.target,
                        open_timeout_s=self.source.open_timeout_s,
                        read_timeout_s=self.source.read_timeout_s,
                        ffmpeg_threads=self._ffmpeg_threads,
                    )
                if cap is not None and self._guard is not None:
                    cap = GuardedCapture(cap, self._guard, self.source.read_timeout_s)
            except Exception as exc:  # cv2.error and friends: the stream fails, not the loader
                cap, self.last_error = None, f"open raised {exc!r}"
            self.opened.set()
            if cap is None:
                took = time.monotonic() - started
                if self.last_error is None or not self.last_error.startswith("open raised"):
                    self.last_error = f"could not open {self.target.open_string!r}" + (
                        f" (gave up after the {self.source.open_timeout_s:g} s open timeout)"
                        if took >= self.source.open_timeout_s * 0.9
                        else ""
                    )
                if not self._backoff(failures):
                    return
                failures += 1
                continue
            if ever_streamed:
                self.reconnects += 1
            failures = 0
            try:
                outcome = self._stream(cap)
            except Exception as exc:
                outcome, self.last_error = "error", f"{type(exc).__name__}: {exc}"
            finally:
                cap.release()
            ever_streamed = True
            if outcome == "stop":
                break
            if outcome in ("ended", "failed"):
                self.state = SourceState.ENDED if outcome == "ended" else SourceState.FAILED
                return
            if not self._backoff(0):  # "lost": a live stream broke; reconnect
                return
        self.state = SourceState.CLOSED

    def _backoff(self, failures: int) -> bool:
        """Wait before the next open; False (with the final state set) when giving up."""
        src = self.source
        if not src.live or (src.max_retries is not None and failures >= src.max_retries):
            self.state = SourceState.FAILED
            return False
        self.state = SourceState.RECONNECTING
        delay = src.backoff_delay(failures)
        self.retry_at = time.monotonic() + delay
        stopped = self._stop.wait(delay)
        self.retry_at = None
        if stopped:
            self.state = SourceState.CLOSED
        return not stopped

    def _stream(self, cap: Any) -> str:
        """Read frames until the end; return ``stop``, ``ended``, ``failed`` or ``lost``."""
        cv2 = require_cv2()
        src = self.source
        self.fps_reported = float(cap.get(cv2.CAP_PROP_FPS) or 0.0)
        declared = int(cap.get(cv2.CAP_PROP_FRAME_COUNT) or 0) if src.kind == "file" else 0
        if src.loop and declared:
            self.position %= declared
        if src.kind == "file" and self.position:
            self._seek(cap, self.position)
        rate = self.fps_reported if 0 < self.fps_reported < 1000 else 30.0
        paced_from = time.monotonic() - self.position / rate
        self._next_wanted = time.monotonic()
        self._reconnect.clear()
        self.last_frame_at, self.streaming_since = None, time.monotonic()
        self.state = SourceState.STREAMING
        interval = 1.0 / rate
        edge = LiveEdge(interval, time.monotonic()) if src.kind != "file" else None
        self._clock.reset()
        while not self._stop.is_set():
            if self._reconnect.is_set():
                self.last_error = "no frame within the stall timeout: reconnecting"
                return "lost"
            if src.realtime:
                early = paced_from + self.position / rate - time.monotonic()
                if early > 0 and self._stop.wait(early):
                    return "stop"
                behind = int((time.monotonic() - paced_from) * rate) - self.position
                for _ in range(min(max(0, behind - 1), _MAX_CATCH_UP_FRAMES)):
                    if not cap.grab():
                        break
                    self.position += 1
                    self.seq += 1
                    self.late += 1
            grab_started = time.monotonic()
            if not cap.grab():
                outcome = self._at_end(cap, declared)
                if outcome == "loop":
                    paced_from = time.monotonic()
                    continue
                return outcome
            now = time.monotonic()
            due = paced_from + self.position / rate
            seq, self.seq, self.position = self.seq, self.seq + 1, self.position + 1
            if edge is not None and edge.is_backlog(grab_started, now):
                self.backlog += 1
                continue
            if src.fps is not None and not self._wanted(seq, now, rate):
                self.skipped += 1
                continue
            if self._wants is not None and not self._wants(now, interval):
                self.unconverted += 1
                continue
            ok, img = cap.retrieve(image=self._buf) if self._buf is not None else cap.retrieve()
            if not ok or img is None:
                self.last_error = f"frame {seq} could not be decoded"
                continue
            if img is not self._buf:
                self._buf = img  # first frame, or the resolution changed: a new buffer
            pts_ms = float(cap.get(cv2.CAP_PROP_POS_MSEC))
            info = FrameInfo(seq=seq, pts_ms=pts_ms, captured_at=self._captured(now, pts_ms, due))
            self.last_frame_at = now
            self.frames += 1
            if not self._sink(img, info):
                return "stop"
        return "stop"

    def _captured(self, grabbed_at: float, pts_ms: float, due: float) -> float:
        """The frame's capture time, as ``age_from`` says (see :mod:`edgeload.video.clock`)."""
        if self.age_from == "pts":
            captured = self._clock.captured_at(grabbed_at, pts_ms)
            if not self._clock.timestamps:
                self.age_from = "grab"  # what the stats say follows what was measured
            return captured
        if self.age_from == "schedule":
            return due
        return grabbed_at

    def _wanted(self, seq: int, now: float, rate: float) -> bool:
        """Whether the ``fps`` limit keeps frame ``seq`` (grabbed at ``now``)."""
        fps = self.source.fps
        assert fps is not None
        if self.source.kind == "file" and not self.source.realtime:
            # Files read faster than real time keep frames by index, not by the clock.
            step = rate / fps
            return step <= 1 or seq == 0 or int(seq / step) != int((seq - 1) / step)
        # Half a source frame of slack: frame arrival jitters around the wanted time.
        if now < self._next_wanted - 0.5 / rate:
            return False
        self._next_wanted = max(self._next_wanted, now - 1.0 / fps) + 1.0 / fps
        return True

    def _at_end(self, cap: Any, declared: int) -> str:
        """The capture stopped giving frames: loop, end, fail or reconnect."""
        cv2 = require_cv2()
        src = self.source
        if src.kind != "file":
            self.last_error = "the stream stopped delivering frames (closed or read timeout)"
            return "lost"
        if declared and self.position + _TRUNCATION_SLACK_FRAMES < declared:
            self.last_error = (
                f"video file {src.uri!r} ended at frame {self.position} of {declared} declared: "
                "truncated or corrupt; re-encode or re-copy it"
            )
            return "failed"
        if not src.loop:
            return "ended"
        self.position = 0
        if not cap.set(cv2.CAP_PROP_POS_FRAMES, 0):
            return "lost"  # reopen through the reconnect path
        return "loop"

    def _seek(self, cap: Any, index: int) -> None:
        """Go to frame ``index``: seek, and read-and-discard where seeking is inexact."""
        cv2 = require_cv2()
        if (
            cap.set(cv2.CAP_PROP_POS_FRAMES, index)
            and int(cap.get(cv2.CAP_PROP_POS_FRAMES)) == index
        ):
            return
        cap.set(cv2.CAP_PROP_POS_FRAMES, 0)
        for _ in range(index):
            if not cap.grab():
                break
