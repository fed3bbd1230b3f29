"""The thread that reads one :class:`~edgeload.video.source.VideoSource`.

A :class:`StreamReader` is made of three parts, each in its own module: the
connection (:mod:`edgeload.video._connection`: open, backoff, reconnect, the phases of
:class:`~edgeload.video.source.SourceState`), the grab/convert loop over each open
capture (:mod:`edgeload.video._frame_loop`: frames into the sink, counted), and the
stall watchdog's lever (:mod:`edgeload.video._watchdog`).  The reader owns the thread
and, where this OpenCV cannot time out network calls, the stall guard beside it.
"""

from __future__ import annotations

import logging
import threading

from ._capture import Target, guard_for
from ._connection import Connection
from ._frame_loop import FrameLoop, Sink, Wants
from .source import VideoSource

_log = logging.getLogger("edgeload")


class StreamReader:
    """Reads one source in its own thread, through its state machine, into a sink.

    Args:
        source: what to read.
        target: how to open it (from :func:`~edgeload.video._capture.build_target`).
        stream_id: the stream's number in its loader (names the thread).
        sink: receives each frame; see :data:`~edgeload.video._frame_loop.Sink`.
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
        self._stop = threading.Event()
        # Only where OpenCV cannot time out network opens and reads (before 4.5.4)
        self._guard = guard_for(target, name=f"edgeload-video-{stream_id}-guard")
        self.connection = Connection(
            source, target, ffmpeg_threads=ffmpeg_threads, gate=gate, guard=self._guard
        )
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
