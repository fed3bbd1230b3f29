"""One stream's connection: open, stream, back off and reopen, until it ends or fails.

:class:`Connection` walks the phases of :class:`~edgeload.video.source.SourceState`
(drawn in :mod:`edgeload.video.source`) in the reader's thread.  An open that fails
or raises, and a live stream that breaks, wait out the source's jittered backoff and
try again; a file that ends or is found truncated, or a live source out of retries,
is done.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

from ._capture import GuardedCapture, StallGuard, Target, open_capture, threads_for_size
from ._fault import StreamFault
from ._frame_loop import FrameLoop
from .source import SourceState, VideoSource


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
    """

    def __init__(
        self,
        source: VideoSource,
        target: Target,
        *,
        ffmpeg_threads: int,
        gate: list[threading.Event] | None,
        guard: StallGuard | None,
    ) -> None:
        self.source, self.target = source, target
        self.ffmpeg_threads, self._gate, self._guard = ffmpeg_threads, gate, guard
        self._sized = False  # the first capture's size has chosen ffmpeg_threads
        self.phase = SourceState.CONNECTING
        self.opened = threading.Event()  # first open attempt finished (either way)
        self.attempts = 0
        self.reconnects = 0
        self.last_error: StreamFault | None = None
        self.retry_at: float | None = None

    def report(self, message: str) -> None:
        """Record a fault seen without an exception as the stream's latest."""
        self.last_error = StreamFault.seen(message)

    def run(self, frames: FrameLoop, stop: threading.Event) -> None:
        """Connect and stream through ``frames`` until the stream is done or ``stop`` is set."""
        until = time.monotonic() + self.source.open_timeout_s * 2
        for event in self._gate or ():
            event.wait(max(0.0, until - time.monotonic()))
        ever_streamed = False
        failures = 0
        while not stop.is_set():
            self.phase = SourceState.RECONNECTING if ever_streamed else SourceState.CONNECTING
            cap = self._open()
            self.opened.set()
            if cap is None:
                if not self._backoff(failures, stop):
                    return
                failures += 1
                continue
            if ever_streamed:
                self.reconnects += 1
            failures = 0
            try:
                outcome = frames.run(cap, stop, self._streaming)
            except Exception as exc:
                outcome = "error"
                self.last_error = StreamFault.raised(exc, f"{type(exc).__name__}: {exc}")
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

    def _open(self) -> Any:
        """One open attempt: the capture, or None with ``last_error`` saying why."""
        src = self.source
        self.attempts += 1
        started = time.monotonic()
        try:
            with self._blocking(src.open_timeout_s):
                cap = self._open_sized()
            if cap is not None and self._guard is not None:
                cap = GuardedCapture(cap, self._guard, src.read_timeout_s)
        except Exception as exc:  # cv2.error and friends: the stream fails, not the loader
            self.last_error = StreamFault.raised(exc, f"open raised {exc!r}")
            return None
        # An earlier open that raised says more than this one, which returned nothing.
        last = self.last_error
        if cap is None and (last is None or not last.message.startswith("open raised")):
            took = time.monotonic() - started
            self.report(f"could not open {self.target.open_string!r}" + (
                f" (gave up after the {src.open_timeout_s:g} s open timeout)"
                if took >= src.open_timeout_s * 0.9
                else ""
            ))  # fmt: skip
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
