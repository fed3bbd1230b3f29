"""Where a reader is in its stream: the next frame, the replay schedule, the file's end.

A :class:`Playhead` numbers the frames a reader grabs (``seq`` never goes back; a
file's ``position`` does when it loops), puts a resumed file at its frame, keeps a
``realtime`` replay on the file's own schedule, and decides what the end of a
capture means: the file loops by seeking (not by reopening, which would take
OpenCV's global FFmpeg open lock), a file that ends well short of the frame count it
declares is truncated, a live stream that stops is lost.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Literal

from .._deps import require_cv2
from .source import VideoSource

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


def seek(cap: Any, index: int) -> None:
    """Go to frame ``index``: seek, and read-and-discard where seeking is inexact."""
    cv2 = require_cv2()
    if cap.set(cv2.CAP_PROP_POS_FRAMES, index) and int(cap.get(cv2.CAP_PROP_POS_FRAMES)) == index:
        return
    cap.set(cv2.CAP_PROP_POS_FRAMES, 0)
    for _ in range(index):
        if not cap.grab():
            break
