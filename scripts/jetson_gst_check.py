#!/usr/bin/env python3
"""The Jetson GStreamer checks (run by scripts/device_check.sh on a Jetson; never run yet,
no Jetson has been available): NVMM decode of each codec and a CSI camera through the
pipelines edgeload builds, and the board's own gst-inspect output against the saved
fixtures the text tests use (tests/fixtures/gst-inspect/).

Exit status: 0 all good, 1 a check failed, 3 not a Jetson (no nvv4l2decoder).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "video"))

# The clip each codec is checked with: ffmpeg arguments and the container.
CLIPS = {
    "h264": (["-c:v", "libx264", "-pix_fmt", "yuv420p"], ".mp4"),
    "h265": (["-c:v", "libx265", "-pix_fmt", "yuv420p"], ".mkv"),
    "mjpeg": (["-c:v", "mjpeg", "-q:v", "3", "-pix_fmt", "yuvj420p"], ".avi"),
}


def main() -> int:
    import numpy as np

    from edgeload.video import StreamLoader, VideoSource
    from edgeload.video._gstreamer import has_element

    if not has_element("nvv4l2decoder"):
        print("not a Jetson: no nvv4l2decoder")
        return 3
    failed = 0
    tmp = Path(tempfile.mkdtemp())
    for codec, (args, suffix) in CLIPS.items():
        path = tmp / f"clip-{codec}{suffix}"
        subprocess.run(["ffmpeg", "-loglevel", "error", "-f", "lavfi", "-i",
                        "testsrc2=size=1920x1080:rate=30", "-t", "2", *args, str(path)],
                       check=True, timeout=120)  # fmt: skip
        with StreamLoader([VideoSource(path, backend="gstreamer")], size=(640, 640)) as loader:
            frames = [b.frames[0].numpy().copy() for b in loader]
            pipeline = loader.stats()["streams"][0]["pipeline"]
        ok = len(frames) == 60 and "nvv4l2decoder" in pipeline and "nvvidconv" in pipeline
        ok = ok and all(np.asarray(f).std() > 1 for f in frames)  # not blank frames
        print(f"{codec}: {'ok' if ok else 'FAIL'} {len(frames)} frames  {pipeline}")
        failed += not ok
    if has_element("nvarguscamerasrc"):
        with StreamLoader([VideoSource("csi://0")], size=(640, 640)) as loader:
            got = 0
            for _batch in loader:
                got += 1
                if got == 30:
                    break
        print(f"csi://0: {'ok' if got == 30 else 'FAIL'} {got} frames")
        failed += got != 30
    # The board's own elements against the fixtures the text tests check pipelines with.
    from test_gst_boards import JETSON, check_against_board, jetson_pipelines

    tool = shutil.which("gst-inspect-1.0")
    for element in ("nvv4l2decoder", "nvvidconv", "nvarguscamerasrc"):
        if tool:
            text = subprocess.run([tool, element], capture_output=True, text=True, timeout=60)
            (tmp / f"{element}.txt").write_text(text.stdout)
            print(f"saved this board's gst-inspect-1.0 {element} to {tmp / element}.txt")
    problems = [p for pipeline in jetson_pipelines() for p in check_against_board(pipeline, JETSON)]
    print("fixture check:", problems or "ok")
    failed += bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
