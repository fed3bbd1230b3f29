"""The thread that reads one :class:`~edgeload.video.source.VideoSource`: the read loop.

A :class:`StreamReader` owns the thread and, where this OpenCV cannot time out network
calls, the stall guard beside it (:class:`~edgeload.video._capture.StallGuard`).  In
that thread it runs:

- **the connection** (:class:`Connection`): open, stream, back off and reopen, until
  the stream ends or fails.  It walks the phases of
  :class:`~edgeload.video.source.SourceState` (drawn in :mod:`edgeload.video.source`).
  An open that fails or raises, and a live stream that breaks, wait out the source's
  jittered backoff and try again; a file that ends or is found truncated, or a live
  source out of retries, is done.
- **the grab/convert loop** (:class:`FrameLoop`): frames from one open capture into the
  reader's sink.  Each frame is grabbed; only those that will be used are retrieved
  (decoded to BGR, into the same buffer every frame: ``cap.retrieve(image=buf)``).
  Frames the ``fps`` limit does not want, the backlog a fresh connection hands over
  (:class:`LiveEdge`), ``latest`` frames no batch will ship
  (:class:`~edgeload.video._mux.Demand`) and the frames a realtime replay fell behind
  on are grabbed and never retrieved, so they cost no colour conversion, copy or
  resize.  Where no such rule applies (a file read without an ``fps`` limit or demand)
  every frame is converted, and one ``cap.read(image=buf)`` does both: one native call,
  so one release and re-take of the GIL per frame instead of two (at 320x240 the
  loader's per-frame Python is 12-17 % of its CPU: ``docs/performance.md``).
- **the playhead** (:class:`Playhead`): where a reader is in its stream.  It numbers the
  frames a reader grabs (``seq`` never goes back; a file's ``position`` does when it
  loops), puts a resumed file at its frame, keeps a ``realtime`` replay on the file's
  own schedule, and decides what the end of a capture means: the file loops by seeking
  (not by reopening, which would take OpenCV's global FFmpeg open lock), a file that
  ends well short of the frame count it declares is truncated, a live stream that
  stops is lost.

**Where a frame's age counts from** (:class:`CaptureClock`), and where a live stream's
live edge is (:class:`LiveEdge`).  ``FrameMeta.age_ms`` is the time from a frame's
capture to its delivery, as far as the source lets edgeload know the capture time.
Each stream names its origin in ``stats()["streams"][i]["age_from"]``:

- ``pts``: network streams (RTSP, HTTP).  The decoder's presentation time (from the
  RTP timestamps) is mapped onto ``time.monotonic()`` by the least-delayed frame
  seen since the stream (re)connected: a frame that sat in a socket or decoder
  buffer shows that wait in its age.  What happened before the least-delayed frame
  reached edgeload (the camera's exposure, encode and network transit) is not seen;
  that is the one part no RTSP client can measure without a clock shared with the
  camera.  The anchor forgives up to 1 ms per second, so a camera clock that runs
  slow is not mistaken for a growing delay.  A stream whose frames carry no
  timestamps (two in a row with the same PTS) switches to ``grab``, and says so.
- ``schedule``: files replayed with ``realtime=True``: the time the frame is due on
  the replay's schedule (its place in the file over the frame rate), which is when
  a camera would have captured it.
- ``grab``: everything else (files read as fast as they decode, local cameras,
  GStreamer pipelines): from the moment edgeload grabbed the frame.

**What last went wrong with one stream**: ``Connection.last_error``, a
:class:`~edgeload.pipeline._failure.Failure` (the record a worker's exception travels
in too), made by ``Failure.seen`` for a fault that raised nothing and by
``Failure.raised`` for one that did.  Its ``message`` is the line
``stats()["last_error"]`` shows; the loader raises it through
:func:`~edgeload.pipeline._failure.user_error`.

**The stall watchdog** (:func:`watchdog`): a live stream that streams no frames for too
long reconnects.  A camera can keep its connection open and stop sending; the read then
waits out its timeout, or (behind some pipelines) never returns.  The loader's mux
thread calls :func:`watchdog` each tick; a stalled reader's frame loop sees the lever
(:meth:`StreamReader.request_reconnect`) at its next frame and reopens the stream
through the reconnect path.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any, Callable, Literal

import numpy as np

from .._deps import require_cv2
from ..errors import SourceError, redact
from ..pipeline._failure import Failure
from ._capture import (
    NETWORK_KINDS,
    GuardedCapture,
    StallGuard,
    Target,
    cut_connections,
    guard_for,
    open_capture,
    opened_mode,
    remote_addresses,
    resolve,
    threads_for_size,
)
from ._native_log import open_log, summary
from ._preflight import preflight
from ._v4l2 import CameraMode
from .source import SourceState, VideoSource

# A sink takes the decoded BGR frame (only valid during the call) and its seq, pts_ms
# and captured_at (as :class:`~edgeload.video.source.FrameInfo` names them: plain
# values, no object made per frame), and returns False when the reader should stop.
Sink = Callable[[np.ndarray, int, float, float], bool]
# Asked after each grab with (grabbed_at, frame interval, this reader's recent time to
# convert and hand over a frame): convert this frame?
Wants = Callable[[float, float, float], bool]
# Weight of the newest delivery in a reader's running estimate of its delivery time.
_DELIVERY_SMOOTHING = 0.2

_log = logging.getLogger("edgeload")
# A streaming reader with no frame for this long may be blocked in a read.
_BLOCKED_AFTER_S = 0.5


class StreamReader:
    """Reads one source in its own thread, through its state machine, into a sink.

    Args:
        source: what to read.
        target: how to open it (from :func:`~edgeload.video._capture.build_target`).
        stream_id: the stream's number in its loader (names the thread).
        sink: receives each frame; see :data:`Sink`.
        ffmpeg_threads: FFmpeg decode threads for this stream.
        start_frame: files: the frame index to start at (resume).
        gate: events to wait for before opening (local sources open before network
            ones), at most twice the open timeout in all.
        wants: asked after each grab whether to convert the frame (``latest``
            streams of a loader: see :class:`~edgeload.video._mux.Demand`); None: all.
        fail_fast: a source whose first open fails is ``failed`` at once (the loader's
            ``on_error="raise"``), instead of retrying with backoff.
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
        fail_fast: bool = False,
        on_open: Callable[[Target], None] | None = None,
    ) -> None:
        self.source = source
        self.target = target
        self.stream_id = stream_id
        self._stop = threading.Event()
        # Only where OpenCV cannot time out network opens and reads (before 4.5.4)
        self._guard = guard_for(target, name=f"edgeload-video-{stream_id}-guard")
        self.connection = Connection(
            source, target, ffmpeg_threads=ffmpeg_threads, gate=gate, guard=self._guard,
            fail_fast=fail_fast, on_open=on_open,
        )  # fmt: skip
        self.frame_loop = FrameLoop(
            source, sink=sink, wants=wants, start_frame=start_frame,
            report=self.connection.report,
        )  # fmt: skip
        self._thread = threading.Thread(
            target=self._run, name=f"edgeload-video-{stream_id}", daemon=True
        )

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
        elif self._blocked_on_network():
            # OpenCV's own timeouts end a blocked open or read only after up to
            # open_timeout_s: shutting the connection down ends it now, so close() and
            # remove() stay bounded (other streams of the same camera reconnect).
            cut_connections(remote_addresses(self.target.open_string))

    def _blocked_on_network(self) -> bool:
        """Whether the thread may be inside an OpenCV network open or read right now."""
        if self.target.backend != "ffmpeg" or self.target.kind not in NETWORK_KINDS:
            return False
        if not self._thread.is_alive() or self.connection.phase.done:
            return False
        if self.connection.opening:
            return True
        last = self.frame_loop.last_frame_at
        streaming = self.connection.phase is SourceState.STREAMING
        return streaming and (last is None or time.monotonic() - last > _BLOCKED_AFTER_S)

    def join(self, timeout_s: float) -> bool:
        """Wait for the thread; return whether it has ended."""
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def request_reconnect(self) -> None:
        """Drop the connection and open again (the watchdog's lever)."""
        self.frame_loop.reconnect.set()

    def _run(self) -> None:
        guard = self._guard
        if guard is None:
            self.connection.run(self.frame_loop, self._stop)
            return
        guard.start()
        try:
            self.connection.run(self.frame_loop, self._stop)
        finally:
            guard.stop()
            if not guard.join(1.0):
                _log.warning("edgeload: stall guard of stream %d did not stop", self.stream_id)


class Connection:
    """The connect/reconnect state machine of one stream, and what it has seen.

    Args:
        source: what to open.
        target: how to open it (from :func:`~edgeload.video._capture.build_target`).
        ffmpeg_threads: FFmpeg decode threads for the capture (the plan's); a small
            file gets one (:func:`~edgeload.video._capture.threads_for_size`), which
            ``ffmpeg_threads`` then holds.
        gate: events to wait for before opening (local sources open before network
            ones), at most twice the open timeout in all.
        guard: the stall guard that times out blocking OpenCV calls, where this
            OpenCV cannot (see :mod:`edgeload.video._capture`); None: not needed.
        fail_fast: a first open that fails makes the stream ``failed`` (no retries).
        on_open: called with the target each capture was opened with, before its first
            frame (the frame writer takes the pipeline's output form from it).
    """

    def __init__(
        self,
        source: VideoSource,
        target: Target,
        *,
        ffmpeg_threads: int,
        gate: list[threading.Event] | None,
        guard: StallGuard | None,
        fail_fast: bool = False,
        on_open: Callable[[Target], None] | None = None,
    ) -> None:
        self.source, self.target = source, target
        self._on_open = on_open
        self.ffmpeg_threads, self._gate, self._guard = ffmpeg_threads, gate, guard
        self._fail_fast = fail_fast
        self.opening = False  # inside cv2.VideoCapture(...) now
        self.failures = 0  # failed opens in a row (the backoff's retry count)
        self._sized = False  # the first capture's size has chosen ffmpeg_threads
        self.phase = SourceState.CONNECTING
        self.opened = threading.Event()  # first open attempt finished (either way)
        self.attempts = 0
        self.reconnects = 0
        self.last_error: Failure | None = None
        self.retry_at: float | None = None
        self.unopenable = False  # the source can never open here (no decoder for its codec)
        self.camera_opened: CameraMode | None = None  # a camera's mode, as OpenCV reads it

    def report(self, message: str) -> None:
        """Record a fault seen without an exception as the stream's latest."""
        self.last_error = Failure.seen(message)

    def run(self, frames: FrameLoop, stop: threading.Event) -> None:
        """Connect and stream through ``frames`` until the stream is done or ``stop`` is set."""
        until = time.monotonic() + self.source.open_timeout_s * 2
        for event in self._gate or ():
            event.wait(max(0.0, until - time.monotonic()))
        ever_streamed = False
        failures = 0
        while not stop.is_set():
            self.phase = SourceState.RECONNECTING if ever_streamed else SourceState.CONNECTING
            cap = self._open(stop)
            self.opened.set()
            if cap is None:
                if stop.is_set():
                    break
                if self.unopenable or (self._fail_fast and not ever_streamed):
                    self.phase = SourceState.FAILED
                    return
                if not self._backoff(failures, stop):
                    return
                failures += 1
                self.failures = failures
                continue
            if ever_streamed:
                self.reconnects += 1
            failures = self.failures = 0
            try:
                outcome = frames.run(cap, stop, self._streaming)
            except Exception as exc:
                outcome = "error"
                self.last_error = Failure.raised(exc, f"{type(exc).__name__}: {exc}")
            finally:
                cap.release()
            ever_streamed = True
            if outcome == "stop":
                break
            if outcome in ("ended", "failed"):
                self.phase = SourceState.ENDED if outcome == "ended" else SourceState.FAILED
                return
            if not self._backoff(0, stop):  # "lost": a live stream broke; reconnect
                return
        self.phase = SourceState.CLOSED

    def _streaming(self) -> None:
        self.phase = SourceState.STREAMING

    def _open(self, stop: threading.Event) -> Any:
        """One open attempt: the capture, or None with ``last_error`` saying why."""
        src = self.source
        self.attempts += 1
        # What a check can tell is said before OpenCV tries (and logs) its own failure.
        cause = preflight(src.kind, src.uri, timeout_s=src.open_timeout_s, stop=stop)
        if cause is not None or stop.is_set():
            if cause is not None:
                self.report(cause)
            return None
        started = time.monotonic()
        # FFmpeg's own lines from this thread meanwhile are the cause OpenCV does not give.
        require_cv2()  # loads the libavutil whose log open_log hooks
        said: list[str] = []
        try:
            self.opening = True
            with open_log(ffmpeg=self.target.backend == "ffmpeg") as said:
                try:
                    self.target = resolve(self.target, timeout_s=src.open_timeout_s)
                    with self._blocking(src.open_timeout_s):
                        cap = self._open_sized()
                except SourceError as exc:
                    # No decoder for its codec, no such camera: opening again won't help.
                    self.last_error = Failure.raised(exc, str(exc))
                    self.unopenable = True
                    return None
            if cap is not None and self.target.kind == "device":
                self.camera_opened = opened_mode(cap)
            if cap is not None and self._guard is not None:
                cap = GuardedCapture(cap, self._guard, src.read_timeout_s)
        except Exception as exc:  # cv2.error and friends: the stream fails, not the loader
            self.last_error = Failure.raised(exc, f"open raised {exc!r}{ffmpeg_says(said)}")
            return None
        finally:
            self.opening = False
        # An earlier open that raised says more than this one, which returned nothing.
        last = self.last_error
        if cap is None and (last is None or not last.message.startswith("open raised")):
            took = time.monotonic() - started
            self.report(f"could not open {redact(self.target.open_string)!r}" + (
                f" (gave up after the {src.open_timeout_s:g} s open timeout)"
                if took >= src.open_timeout_s * 0.9
                else ""
            ) + ffmpeg_says(said))  # fmt: skip
        elif cap is not None and said:
            _log.debug("edgeload: %s opened; FFmpeg said: %s",
                       redact(self.target.open_string), redact(summary(said)))  # fmt: skip
        if cap is not None and self._on_open is not None:
            self._on_open(self.target)
        return cap

    def _open_sized(self) -> Any:
        """Open the capture; the first that opens may be opened again with fewer FFmpeg
        threads for its frame size, before any frame is read (a file reopens cheaply)."""
        src = self.source
        cap = open_capture(
            self.target,
            open_timeout_s=src.open_timeout_s,
            read_timeout_s=src.read_timeout_s,
            ffmpeg_threads=self.ffmpeg_threads,
        )
        if cap is None or self._sized:
            return cap
        self._sized = True
        threads = threads_for_size(self.target, cap, self.ffmpeg_threads)
        if threads == self.ffmpeg_threads:
            return cap
        cap.release()
        self.ffmpeg_threads = threads
        return self._open_sized()

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

    def _backoff(self, failures: int, stop: threading.Event) -> bool:
        """Wait before the next open; False (with the final phase set) when giving up."""
        src = self.source
        if not src.live or (src.max_retries is not None and failures >= src.max_retries):
            self.phase = SourceState.FAILED
            return False
        self.phase = SourceState.RECONNECTING
        delay = src.backoff_delay(failures)
        self.retry_at = time.monotonic() + delay
        stopped = stop.wait(delay)
        self.retry_at = None
        if stopped:
            self.phase = SourceState.CLOSED
        return not stopped


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
    file's end) is its :class:`Playhead`, ``playhead``.

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
        self.delivery_s = 0.0  # running estimate: retrieve, convert and hand over a frame
        self.fps_reported = 0.0
        self.age_from: AgeOrigin = (
            "pts" if source.network else "schedule" if source.realtime else "grab"
        )
        self.last_frame_at: float | None = None
        self.streaming_since: float | None = None
        self.reconnect = threading.Event()  # the watchdog's lever
        by_index = (source.kind == "file" and not source.realtime) or source.recorded
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
        # A recorded file over HTTP arrives as fast as it downloads: no live edge.
        edge = (
            LiveEdge(interval, time.monotonic())
            if src.kind != "file" and not src.recorded
            else None
        )
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
                elif self._wants is not None and not self._wants(now, interval, self.delivery_s):
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
        go_on = self._hand_over(cap, img, seq, now)
        took = time.monotonic() - now
        self.delivery_s += _DELIVERY_SMOOTHING * (took - self.delivery_s)
        return go_on

    def _hand_over(self, cap: Any, img: np.ndarray, seq: int, now: float) -> bool:
        """Give a converted frame, with its info, to the sink; False: the reader stops."""
        pts_ms = float(cap.get(self._pos_msec))
        # "grab" is _captured's last case, answered here: one Python call less a frame.
        captured = now if self.age_from == "grab" else self._captured(now, pts_ms)
        self.last_frame_at = now
        self.frames += 1
        return self._sink(img, seq, pts_ms, captured)

    def _captured(self, grabbed_at: float, pts_ms: float) -> float:
        """The frame's capture time, as ``age_from`` says (see the module docstring)."""
        if self.age_from == "pts":
            captured = self._clock.captured_at(grabbed_at, pts_ms)
            if not self._clock.timestamps:
                self.age_from = "grab"  # what the stats say follows what was measured
            return captured
        if self.age_from == "schedule":
            return self.playhead.due_of_last()
        return grabbed_at


# What the end of a capture means; "loop" means the file was put back at frame 0.
EndOutcome = Literal["loop", "ended", "failed", "lost"]

# A declared frame count this far beyond where reading stopped means truncation.
_TRUNCATION_SLACK_FRAMES = 2
# A realtime replay this many frames behind skips ahead rather than catching up.
_MAX_CATCH_UP_FRAMES = 300
# A frame rate outside (0, this) is a container's placeholder, not the stream's rate.
_MAX_PLAUSIBLE_FPS = 1000
_DEFAULT_FPS = 30.0


class Playhead:
    """The next frame of one stream, and the schedule a realtime replay keeps.

    Args:
        source: what is read.
        start_frame: files: the frame index to start at (resume).
        report: records the stream's latest error text.
    """

    def __init__(
        self, source: VideoSource, *, start_frame: int, report: Callable[[str], None]
    ) -> None:
        self.source = source
        self._report = report
        self.position = start_frame  # next frame index in the file
        self.seq = start_frame  # next frame's number as the consumer sees it
        self.late = 0  # realtime replay frames skipped because the reader was behind
        self.rate = _DEFAULT_FPS  # frames per second the schedule runs at
        self._declared = 0  # the file's frame count, as its header says; 0: unknown
        self._paced_from = 0.0  # when frame 0 was due on the replay's schedule

    def start(self, cap: Any, fps_reported: float) -> None:
        """A capture opened: put it at this playhead's frame and start the schedule."""
        cv2 = require_cv2()
        src = self.source
        self._declared = int(cap.get(cv2.CAP_PROP_FRAME_COUNT) or 0) if src.kind == "file" else 0
        if src.loop and self._declared:
            self.position %= self._declared
        if src.kind == "file" and self.position:
            seek(cap, self.position)
        ok = 0 < fps_reported < _MAX_PLAUSIBLE_FPS
        self.rate = fps_reported if ok else _DEFAULT_FPS
        self._paced_from = time.monotonic() - self.position / self.rate

    def advance(self) -> int:
        """A frame was grabbed: return its ``seq`` and move past it."""
        seq = self.seq
        self.seq, self.position = seq + 1, self.position + 1
        return seq

    def due_of_last(self) -> float:
        """When the frame :meth:`advance` last passed was due on the replay's schedule."""
        return self._paced_from + (self.position - 1) / self.rate

    def keep_pace(self, cap: Any, stop: threading.Event) -> bool:
        """Realtime replay: wait for the next frame's time, or grab past the frames it
        is behind on (counted as ``late``); False when stopped meanwhile."""
        early = self._paced_from + self.position / self.rate - time.monotonic()
        if early > 0 and stop.wait(early):
            return False
        behind = int((time.monotonic() - self._paced_from) * self.rate) - self.position
        for _ in range(min(max(0, behind - 1), _MAX_CATCH_UP_FRAMES)):
            if not cap.grab():
                break
            self.position += 1
            self.seq += 1
            self.late += 1
        return True

    def at_end(self, cap: Any) -> EndOutcome:
        """The capture stopped giving frames: ``loop``, ``ended``, ``failed`` or ``lost``."""
        cv2 = require_cv2()
        src = self.source
        if src.recorded:
            return "ended"  # a recorded file over HTTP: its end, not a lost stream
        if src.kind != "file":
            self._report("the stream stopped delivering frames (closed or read timeout)")
            return "lost"
        declared = self._declared
        if declared and self.position + _TRUNCATION_SLACK_FRAMES < declared:
            self._report(
                f"video file {src.uri!r} ended at frame {self.position} of {declared} declared: "
                "truncated or corrupt; re-encode or re-copy it"
            )
            return "failed"
        if not src.loop:
            return "ended"
        self.position = 0
        if not cap.set(cv2.CAP_PROP_POS_FRAMES, 0):
            return "lost"  # reopen through the reconnect path
        self._paced_from = time.monotonic()
        return "loop"


def ffmpeg_says(lines: list[str]) -> str:
    """What FFmpeg logged during an open, as a clause for the stream's error ("" if
    nothing); :class:`~edgeload.pipeline._failure.Failure` hides its passwords."""
    said = summary(lines)
    return f" (FFmpeg: {said})" if said else ""


def seek(cap: Any, index: int) -> None:
    """Go to frame ``index``: seek, and read-and-discard where seeking is inexact."""
    cv2 = require_cv2()
    if cap.set(cv2.CAP_PROP_POS_FRAMES, index) and int(cap.get(cv2.CAP_PROP_POS_FRAMES)) == index:
        return
    cap.set(cv2.CAP_PROP_POS_FRAMES, 0)
    for _ in range(index):
        if not cap.grab():
            break


AgeOrigin = Literal["pts", "schedule", "grab"]

_CREEP_PER_S = 0.001  # how fast the anchor forgives: 1 ms per second (1000 ppm)
_LIVE_EDGE_WAIT = 0.5  # a grab that waited this many frame intervals got a live frame
MAX_CATCH_UP_S = 3.0  # most seconds spent dropping a reconnect's backlog


class CaptureClock:
    """Maps one connection's presentation times to ``time.monotonic()``."""

    def __init__(self) -> None:
        self._offset: float | None = None
        self._offset_at = 0.0
        self._last_pts: float | None = None
        self.timestamps = True
        """False once two frames came with the same PTS: the source has none."""

    def reset(self) -> None:
        """A new connection: its timestamps start afresh."""
        self._offset, self._last_pts = None, None

    def captured_at(self, grabbed_at: float, pts_ms: float) -> float:
        """The capture time of a frame grabbed at ``grabbed_at`` with ``pts_ms``."""
        last, self._last_pts = self._last_pts, pts_ms
        if last is not None and pts_ms < last:
            self._offset = None  # the timestamps went back: the camera restarted them
        if last is not None and pts_ms == last:
            self.timestamps = False  # this source gives none: count from the grab
            return grabbed_at
        offset = grabbed_at - pts_ms / 1000.0
        if self._offset is not None:
            forgiven = self._offset + _CREEP_PER_S * (grabbed_at - self._offset_at)
            offset = min(offset, forgiven)
        self._offset, self._offset_at = offset, grabbed_at
        return offset + pts_ms / 1000.0


class LiveEdge:
    """Tells the backlog a fresh connection hands over from frames that are live.

    An FFmpeg open reads ahead while it probes the stream (about a second), and
    those frames then come out of ``grab()`` back to back, each older than the last
    live one.  They are decoded (the next frames need them) and dropped without
    conversion until a grab has to wait for the network: that frame is live.
    """

    def __init__(self, interval_s: float, start: float) -> None:
        self._wait_s = _LIVE_EDGE_WAIT * interval_s
        self._until = start + MAX_CATCH_UP_S
        self._first = True
        self.reached = False

    def is_backlog(self, grab_started: float, grabbed_at: float) -> bool:
        """Whether the frame just grabbed is backlog (drop it); False once live.

        The first grab after an open proves nothing when it waits: that wait can be
        the decoder starting (threads, the first key frame) with the backlog behind it.
        """
        if self.reached:
            return False
        first, self._first = self._first, False
        waited = grabbed_at - grab_started >= self._wait_s and not first
        if waited or grabbed_at >= self._until:
            self.reached = True
            return False
        return True


def stalled(reader: StreamReader, now: float) -> bool:
    """Whether ``reader`` is streaming a live source and has had no frame for longer
    than its ``stall_timeout_s`` (counted from the connection when none came yet)."""
    source = reader.source
    if not source.live or reader.connection.phase is not SourceState.STREAMING:
        return False
    since = reader.frame_loop.last_frame_at or reader.frame_loop.streaming_since
    return since is not None and now - since > source.stall_timeout_s


def watchdog(streams: Iterable[Any]) -> None:
    """Reconnect each stalled reader among ``streams`` (loader entries with ``.reader``)."""
    now = time.monotonic()
    for stream in streams:
        if stream.reader is not None and stalled(stream.reader, now):
            stream.reader.request_reconnect()
