"""Real components a test needs: skip without them, unless a switch says they must exist.

``EDGELOAD_REQUIRE_<NAME>=1`` turns the skip into a failure. ``.ci/run`` sets the
switches for ffmpeg, GStreamer OpenCV and gst-rtsp-server, and any ``CI`` environment
(GitHub Actions and most others set ``CI``) implies them, so a CI image that silently
lost one of them fails instead of passing on skips. CUDA is not implied: CI boxes have
no GPU (scripts/device_check.sh sets ``EDGELOAD_REQUIRE_CUDA=1`` where there is one).
"""

from __future__ import annotations

import os
import subprocess
from typing import NoReturn

import pytest

SYSTEM_PYTHON = "/usr/bin/python3"
IMPLIED_BY_CI = ("FFMPEG", "GSTREAMER", "RTSP")


def required(name: str) -> bool:
    """Whether component ``name`` (FFMPEG, GSTREAMER, RTSP, CUDA) must be present."""
    value = os.environ.get(f"EDGELOAD_REQUIRE_{name}")
    if value is not None:
        return value == "1"
    return name in IMPLIED_BY_CI and bool(os.environ.get("CI"))


def missing(name: str, reason: str) -> NoReturn:
    """Skip the test for lack of ``name``, or fail it when ``name`` is required."""
    if required(name):
        pytest.fail(f"EDGELOAD_REQUIRE_{name} is on (or CI is set) but {reason}", pytrace=False)
    pytest.skip(reason)


def system_python_has(code: str) -> bool:
    """Whether ``code`` runs without error in Debian's Python (GObject, its OpenCV)."""
    try:
        done = subprocess.run([SYSTEM_PYTHON, "-c", code], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


GST_OPENCV_PROBE = (
    "import cv2, re, sys; sys.exit(not re.search(r'GStreamer:\\s+YES', cv2.getBuildInformation()))"
)
RTSP_SERVER_PROBE = (
    "import gi; gi.require_version('GstRtspServer', '1.0'); from gi.repository import GstRtspServer"
)
