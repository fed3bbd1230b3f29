"""Real test media: tiny H.264 clips written with Debian's ffmpeg (libx264).

``clip()`` writes a clip once per directory and parameters and returns its path; the
tests call it with the session's base temp dir, so each clip is encoded once per run.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from _require import missing

FFMPEG = shutil.which("ffmpeg")


def clip(
    directory: Path,
    *,
    size: tuple[int, int] = (160, 120),
    fps: int = 30,
    seconds: float = 2.0,
    pattern: str = "testsrc2",
) -> Path:
    """Write (once) an H.264 MP4 of ``seconds`` at ``fps`` and ``size``; return its path.

    ``+faststart`` puts the index first, so a cut-off copy still opens and reports the
    full frame count: a truncated file, not an unreadable one.
    """
    if FFMPEG is None:
        missing("FFMPEG", "ffmpeg (Debian package ffmpeg) is needed to write H.264 test clips")
    w, h = size
    path = directory / f"{pattern}-{w}x{h}-{fps}fps-{seconds:g}s.mp4"
    if path.exists():
        return path
    part = path.with_suffix(".part.mp4")
    subprocess.run(
        [FFMPEG, "-loglevel", "error", "-y", "-f", "lavfi", "-i",
         f"{pattern}=size={w}x{h}:rate={fps}", "-t", f"{seconds}", "-c:v", "libx264",
         "-preset", "ultrafast", "-tune", "zerolatency", "-pix_fmt", "yuv420p",
         "-g", str(fps), "-movflags", "+faststart", str(part)],
        check=True,
        timeout=60,
    )  # fmt: skip
    part.rename(path)
    return path


def square_clip(
    directory: Path,
    *,
    size: tuple[int, int],
    square: tuple[int, int, int, int],
    fps: int = 30,
    seconds: float = 0.5,
) -> Path:
    """Write (once) an H.264 MP4 of a black ``size`` frame with a white filled box at
    ``square`` = ``(x0, y0, x1, y1)`` source pixels (even values keep its edges sharp
    in yuv420p); return its path."""
    if FFMPEG is None:
        missing("FFMPEG", "ffmpeg (Debian package ffmpeg) is needed to write H.264 test clips")
    (w, h), (x0, y0, x1, y1) = size, square
    path = directory / f"square-{w}x{h}-{x0}-{y0}-{x1}-{y1}-{fps}fps-{seconds:g}s.mp4"
    if path.exists():
        return path
    part = path.with_suffix(".part.mp4")
    box = f"drawbox=x={x0}:y={y0}:w={x1 - x0}:h={y1 - y0}:color=white:t=fill"
    subprocess.run(
        [FFMPEG, "-loglevel", "error", "-y", "-f", "lavfi", "-i",
         f"color=c=black:size={w}x{h}:rate={fps},{box}", "-t", f"{seconds}", "-c:v",
         "libx264", "-preset", "ultrafast", "-qp", "0", "-pix_fmt", "yuv420p",
         "-g", str(fps), str(part)],
        check=True,
        timeout=60,
    )  # fmt: skip
    part.rename(path)
    return path


def truncated_copy(source: Path, directory: Path, *, fraction: float = 0.4) -> Path:
    """A copy of ``source`` cut after ``fraction`` of its bytes (a broken download)."""
    out = directory / f"truncated-{fraction:g}-{source.name}"
    if not out.exists():
        data = source.read_bytes()
        out.write_bytes(data[: int(len(data) * fraction)])
    return out


def media_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's shared directory for clips."""
    path = tmp_path_factory.getbasetemp() / "edgeload-media"
    path.mkdir(exist_ok=True)
    return path


def ffmpeg_frames(path: Path, size: tuple[int, int] | None = None) -> list:
    """Every frame of ``path`` as OpenCV's FFmpeg decodes it (BGR), resized to ``size``
    (``(width, height)``) when given: the reference a loader's frames are checked against."""
    import cv2

    cap = cv2.VideoCapture(str(path), cv2.CAP_FFMPEG)
    frames = []
    try:
        while True:
            ok, frame = cap.read()
            if not ok:
                return frames
            if size is not None:
                frame = cv2.resize(frame, size, interpolation=cv2.INTER_LINEAR)
            frames.append(frame)
    finally:
        cap.release()
