"""Where a frame's age counts from, and where a live stream's live edge is.

``FrameMeta.age_ms`` is the time from a frame's capture to its delivery, as far as
the source lets edgeload know the capture time.  Each stream names its origin in
``stats()["streams"][i]["age_from"]``:

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
"""

from __future__ import annotations

from typing import Literal

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
