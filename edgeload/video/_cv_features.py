"""What this OpenCV can do for a capture, found at run time, and what edgeload does without it.

The floor is OpenCV 4.5.1 (Debian bullseye); JetPack 5 ships 4.5.4, JetPack 6 4.8. Newer
builds took on the controls edgeload uses for live streams:

- the ``params`` list of ``cv2.VideoCapture(source, api, params)``: 4.5.2;
- ``CAP_PROP_OPEN_TIMEOUT_MSEC`` and ``CAP_PROP_READ_TIMEOUT_MSEC``: 4.5.4 (through params);
- ``CAP_PROP_N_THREADS`` (FFmpeg decode threads): 4.7.

Without the timeouts, OpenCV's FFmpeg backend waits on a silent network stream for its
own fixed limit; edgeload's stall guard (``_cutoff.py``) cuts the stream's
TCP connection after the source's ``open_timeout_s`` / ``read_timeout_s`` instead, so the
reader reconnects and ``close()`` returns. Without the thread cap, FFmpeg picks its own
decode thread count.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from dataclasses import dataclass
from typing import Any

from .._deps import require_cv2

__all__ = ["STALL_GUARD_VAR", "CaptureFeatures", "capture_fallbacks", "capture_features"]

STALL_GUARD_VAR = "EDGELOAD_STALL_GUARD"


@dataclass(frozen=True)
class CaptureFeatures:
    """The capture controls this OpenCV has."""

    version: tuple[int, int, int]
    params: bool
    """``VideoCapture(source, api, params)`` is accepted (4.5.2+)."""
    open_timeout: bool
    """``CAP_PROP_OPEN_TIMEOUT_MSEC`` exists and can be passed (4.5.4+)."""
    read_timeout: bool
    """``CAP_PROP_READ_TIMEOUT_MSEC`` exists and can be passed (4.5.4+)."""
    n_threads: bool
    """``CAP_PROP_N_THREADS`` exists and can be passed (4.7+)."""

    @property
    def timeouts(self) -> bool:
        """Both network timeouts reach FFmpeg."""
        return self.open_timeout and self.read_timeout


def parse_version(text: str) -> tuple[int, int, int]:
    """``"4.5.1"``, ``"4.10.0-dev"`` -> (4, 5, 1), (4, 10, 0); unknown parts are 0."""
    parts = [int(p) for p in re.findall(r"\d+", text)[:3]]
    parts += [0] * (3 - len(parts))
    return parts[0], parts[1], parts[2]


def features_of(cv2: Any) -> CaptureFeatures:
    """Read the features off a cv2 module (the installed one, or another for tests)."""
    version = parse_version(str(getattr(cv2, "__version__", "0")))
    params = version >= (4, 5, 2)
    return CaptureFeatures(
        version=version,
        params=params,
        open_timeout=params and hasattr(cv2, "CAP_PROP_OPEN_TIMEOUT_MSEC"),
        read_timeout=params and hasattr(cv2, "CAP_PROP_READ_TIMEOUT_MSEC"),
        n_threads=params and hasattr(cv2, "CAP_PROP_N_THREADS"),
    )


@functools.lru_cache(maxsize=1)
def _installed() -> CaptureFeatures:
    return features_of(require_cv2())


def capture_features() -> CaptureFeatures:
    """The installed OpenCV's capture features.

    ``EDGELOAD_STALL_GUARD=1`` makes edgeload act as on an OpenCV without the timeouts
    (the stall guard instead): for an OpenCV whose timeouts misbehave, and for testing
    the guard on a new OpenCV.
    """
    found = _installed()
    if os.environ.get(STALL_GUARD_VAR) == "1":
        found = dataclasses.replace(found, open_timeout=False, read_timeout=False)
    return found


def capture_fallbacks(features: CaptureFeatures | None = None) -> list[tuple[str, str]]:
    """What this OpenCV lacks for capture, each with what edgeload does instead."""
    f = capture_features() if features is None else features
    found = []
    if not f.params:
        found.append(
            (
                "OpenCV has no VideoCapture params list (4.5.2+)",
                "captures open with the backend only; no per-capture properties",
            )
        )
    if not f.timeouts:
        found.append(
            (
                "OpenCV has no FFmpeg open/read timeouts (CAP_PROP_*_TIMEOUT_MSEC, 4.5.4+)",
                "the stall guard cuts a silent network stream's connection after "
                "open_timeout_s / read_timeout_s, then the reader reconnects",
            )
        )
    if not f.n_threads:
        found.append(
            (
                "OpenCV has no FFmpeg decode thread cap (CAP_PROP_N_THREADS, 4.7+)",
                "FFmpeg picks its own decode thread count; the plan's stream count "
                "and worker caps bound the load",
            )
        )
    return found
