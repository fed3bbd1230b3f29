"""``examples/detect.py``: a detector's boxes come back in each camera's own pixels."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import cv2
import pytest
from _media import media_dir, square_clip

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "detect.py"
# A Python with ultralytics for the YOLOv8n run (default: this one, when it has it).
ULTRALYTICS_PYTHON = os.environ.get("EDGELOAD_ULTRALYTICS_PYTHON", sys.executable)
_BOX = re.compile(r"^box stream=(\d+) seq=(\d+) ([\d.]+) ([\d.]+) ([\d.]+) ([\d.]+) ", re.M)
_TIMEOUT_S = 120


def _detect(python: str, sources: list[Path], *args: str) -> str:
    env = dict(os.environ, YOLO_OFFLINE="True", YOLO_VERBOSE="False")
    root = str(EXAMPLE.parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    done = subprocess.run(
        [python, str(EXAMPLE), *map(str, sources), *args],
        capture_output=True, text=True, timeout=_TIMEOUT_S, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_boxes_come_back_in_each_sources_pixels(tmp_path_factory, tmp_path):
    # Both aspects differ from the 320x320 input: the wide clip is padded above and
    # below, the tall one left and right, each by its own amount.
    wide = (640, 360), (400, 100, 520, 180)
    tall = (360, 640), (100, 400, 220, 500)
    clips = [square_clip(media_dir(tmp_path_factory), size=s, square=q, seconds=1.0)
             for s, q in (wide, tall)]  # fmt: skip
    sheet = tmp_path / "sheet.png"
    out = _detect(sys.executable, clips, "--model", "square", "--imgsz", "320",
                  "--seconds", "30", "--print-boxes", "--out", str(sheet))  # fmt: skip
    boxes = [(int(m[0]), [float(v) for v in m[2:]]) for m in _BOX.findall(out)]
    for stream, (_, square) in enumerate((wide, tall)):
        got = [box for sid, box in boxes if sid == stream]
        assert len(got) >= 20, out[-2000:]  # the clips have 30 frames each
        for box in got:
            # One output pixel is two source pixels at this scale; the edges are sharp.
            assert all(abs(a - b) <= 3 for a, b in zip(box, square)), (stream, box, square)
        assert re.search(rf"^stream {stream}: \d+ frames, [\d.]+ fps, capture-to-result age "
                         r"p50 \d+ ms p99 \d+ ms$", out, re.M), out[-2000:]  # fmt: skip
    image = cv2.imread(str(sheet))
    assert image is not None and image.shape[1] == 960  # two 480-pixel tiles side by side


def _has_ultralytics(python: str) -> bool:
    code = "import ultralytics"
    return subprocess.run([python, "-c", code], capture_output=True, timeout=60).returncode == 0


def test_yolov8n_runs_on_the_loader(tmp_path_factory):
    if not _has_ultralytics(ULTRALYTICS_PYTHON):
        pytest.skip(f"{ULTRALYTICS_PYTHON} cannot import ultralytics (set "
                    "EDGELOAD_ULTRALYTICS_PYTHON to a Python that has it)")  # fmt: skip
    path = square_clip(media_dir(tmp_path_factory), size=(640, 360),
                       square=(400, 100, 520, 180), seconds=1.0)  # fmt: skip
    out = _detect(ULTRALYTICS_PYTHON, [path], "--model", "yolov8n.yaml", "--seconds", "2")
    assert "model yolov8n.yaml, NMS " in out
    assert re.search(r"^stream 0: [1-9]\d* frames, [\d.]+ fps", out, re.M), out[-2000:]
