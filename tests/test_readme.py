"""The README's quickstarts run as written: each ``<!-- quickstart: NAME -->`` block is
run as a script in a fresh folder, with what it names there (an RTSP camera on
127.0.0.1:8554, ``lot.mp4``)."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from _media import clip, media_dir

README = Path(__file__).resolve().parents[1] / "README.md"
ROOT = README.parent


def quickstart(name: str) -> str:
    text = README.read_text()
    match = re.search(rf"<!-- quickstart: {name} -->\n```python\n(.*?)```", text, re.S)
    assert match, f"README.md has no quickstart {name!r}"
    return match.group(1)


def run(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    script = cwd / "quickstart.py"
    script.write_text(code)
    return subprocess.run(
        [sys.executable, str(script)], cwd=cwd, capture_output=True, text=True, timeout=240,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip


def test_the_dataset_quickstart_saves_and_resumes_mid_epoch(tmp_path):
    out = run(quickstart("datasets"), tmp_path)
    assert out.returncode == 0, out.stderr
    # 1000 samples in batches of 32: 32 batches; 11 were taken before the save.
    assert out.stdout.strip().splitlines()[-1] == "21 batches left"
    assert (tmp_path / "ckpt" / "loader.json").is_file()


@pytest.mark.rtsp
def test_the_camera_quickstart_reads_a_camera_and_a_file(tmp_path_factory, tmp_path):
    sys.path.insert(0, str(Path(__file__).parent / "video"))
    from test_rtsp import RtspServer

    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", 8554)) == 0:
            pytest.fail("port 8554 is taken: the README's camera URL needs it free")
    media = clip(media_dir(tmp_path_factory), size=(320, 240), fps=30, seconds=2.0)
    shutil.copy(media, tmp_path / "lot.mp4")
    server = RtspServer(8554)
    url = server.start(media)
    try:
        assert url == "rtsp://127.0.0.1:8554/stream"
        out = run(quickstart("cameras"), tmp_path)
    finally:
        server.stop()
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[-1] == "streaming"  # the camera's state at the end
    frames = [line.split() for line in lines[:-1]]
    assert {f[0] for f in frames} == {"0", "1"}, out.stdout  # both sources delivered
    assert all(f[-2:] == ["(320,", "240)"] for f in frames), out.stdout
