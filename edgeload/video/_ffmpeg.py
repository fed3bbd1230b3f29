"""FFmpeg options for one capture open, without changing what other captures get.

OpenCV's FFmpeg backend has no per-open parameter for demuxer options such as
``rtsp_transport``: it reads them from ``OPENCV_FFMPEG_CAPTURE_OPTIONS``
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
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

from ..pipeline._lifecycle import scoped_environ

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
