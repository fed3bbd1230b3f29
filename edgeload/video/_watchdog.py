"""The stall watchdog: a live stream that streams no frames for too long reconnects.

A camera can keep its connection open and stop sending; the read then waits out its
timeout, or (behind some pipelines) never returns.  The loader's mux thread calls
:func:`watchdog` each tick; a stalled reader's frame loop sees the lever
(:meth:`~edgeload.video.reader.StreamReader.request_reconnect`) at its next frame and
reopens the stream through the reconnect path.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from .reader import StreamReader
from .source import SourceState


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
