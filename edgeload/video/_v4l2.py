"""USB (V4L2) camera modes: what a camera offers, and the one closest to a request.

A camera lists its modes (pixel format, size, frame rate) to ``v4l2-ctl
--list-formats-ext``; :func:`parse_modes` reads that output (both the older ``Index :``
/ ``Pixel Format:`` layout and the newer ``[0]: 'MJPG'`` one), and :func:`choose_mode`
picks the mode closest to what the user asked, as jetson-utils' gstCamera does:

1. the size nearest the requested one (any size when none was asked);
2. a rate that reaches the requested one (the highest when none was asked);
3. raw (``YUYV``) over ``MJPG`` when both reach the rate: raw costs no decode, but USB 2
   carries raw 1080p at 5-10 fps only, so MJPG is taken where raw cannot keep up;
4. the highest rate on a tie, then the largest size.

Where the modes cannot be listed (no ``v4l2-ctl``, a camera index on another OS), the
request is passed as it is and the driver picks the nearest it has; ``stats()`` shows
what was asked and what was opened either way.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Sequence
from fractions import Fraction
from typing import Literal, NamedTuple

Fourcc = Literal["MJPG", "YUYV"]
FOURCCS = ("MJPG", "YUYV")
_COMPRESSED = ("MJPG", "JPEG")

_FORMAT = re.compile(r"(?:\[\d+\]:|Pixel Format\s*:)\s*'(\S{1,4})\s*'")
_SIZE = re.compile(r"Size:\s*Discrete\s+(\d+)x(\d+)")
_RATE = re.compile(r"Interval:\s*Discrete\s+[\d.]+s\s+\(([\d.]+)\s*fps\)")


class CameraMode(NamedTuple):
    """One mode a camera offers (or was asked for, or opened)."""

    fourcc: str
    """``MJPG``, ``YUYV``, ...; '' where not known."""
    width: int
    height: int
    fps: float
    """0: not known."""

    def describe(self) -> str:
        """``"MJPG 1920x1080 @ 30 fps"``."""
        rate = f" @ {self.fps:g} fps" if self.fps else ""
        return f"{self.fourcc or 'any format'} {self.width}x{self.height}{rate}".strip()


class CameraRequest(NamedTuple):
    """What the user asked of a camera: each part None when not asked."""

    resolution: tuple[int, int] | None
    fps: float | None
    fourcc: str | None

    @property
    def empty(self) -> bool:
        return self.resolution is None and self.fps is None and self.fourcc is None


def parse_modes(text: str) -> list[CameraMode]:
    """The discrete modes in a ``v4l2-ctl --list-formats-ext`` output, in its order.

    A size listed without rates gets fps 0; stepwise and continuous sizes are left out
    (the driver takes any size within them, so there is nothing to choose from).
    """
    modes: list[CameraMode] = []
    fourcc, size, rated = "", None, True
    for line in text.splitlines():
        found = _FORMAT.search(line)
        if found:
            if size is not None and not rated:
                modes.append(CameraMode(fourcc, size[0], size[1], 0.0))
            fourcc, size, rated = found.group(1).strip(), None, True
            continue
        found = _SIZE.search(line)
        if found:
            if size is not None and not rated:
                modes.append(CameraMode(fourcc, size[0], size[1], 0.0))
            size, rated = (int(found.group(1)), int(found.group(2))), False
            continue
        found = _RATE.search(line)
        if found and size is not None:
            modes.append(CameraMode(fourcc, size[0], size[1], float(found.group(1))))
            rated = True
    if size is not None and not rated:
        modes.append(CameraMode(fourcc, size[0], size[1], 0.0))
    return modes


def choose_mode(modes: Sequence[CameraMode], request: CameraRequest) -> CameraMode | None:
    """The mode of ``modes`` closest to ``request`` (see the module docstring), or None
    when no mode has the requested fourcc (``MJPG`` or ``YUYV`` when none was asked:
    the formats edgeload decodes)."""
    wanted = FOURCCS if request.fourcc is None else (request.fourcc,)
    pool = [m for m in modes if m.fourcc in wanted]
    if not pool:
        return None

    def key(mode: CameraMode) -> tuple[float, float, int, float, int]:
        if request.resolution is None:
            distance = 0.0
        else:
            distance = float(
                abs(mode.width - request.resolution[0]) + abs(mode.height - request.resolution[1])
            )
        shortfall = -mode.fps if request.fps is None else max(0.0, request.fps - mode.fps)
        compressed = 1 if mode.fourcc in _COMPRESSED else 0
        return distance, shortfall, compressed, -mode.fps, -mode.width * mode.height

    return min(pool, key=key)


def list_modes(device: str, *, timeout_s: float = 5.0) -> list[CameraMode]:
    """The camera's modes from ``v4l2-ctl --list-formats-ext``; empty when the tool is
    missing, the device does not answer within ``timeout_s`` or lists nothing."""
    tool = shutil.which("v4l2-ctl")
    if tool is None:
        return []
    try:
        done = subprocess.run(
            [tool, "-d", device, "--list-formats-ext"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return parse_modes(done.stdout) if done.returncode == 0 else []


def requested_mode(request: CameraRequest, modes: Sequence[CameraMode]) -> CameraMode | None:
    """The mode to ask the camera for: the closest listed one, else the request as it is
    (None when nothing was asked)."""
    if request.empty:
        return None
    chosen = choose_mode(modes, request) if modes else None
    if chosen is not None:
        return chosen
    width, height = request.resolution or (0, 0)
    return CameraMode(request.fourcc or "", width, height, request.fps or 0.0)


def framerate(fps: float) -> str:
    """``fps`` as a GStreamer fraction: ``30/1``, ``15/2``, ``30000/1001``."""
    rate = Fraction(fps).limit_denominator(1001)
    return f"{rate.numerator}/{rate.denominator}"


def fourcc_text(code: float) -> str:
    """An OpenCV ``CAP_PROP_FOURCC`` value as its four characters ('' for 0)."""
    value = int(code)
    text = "".join(chr((value >> (8 * i)) & 0xFF) for i in range(4))
    return text.strip("\x00 ") if value else ""
