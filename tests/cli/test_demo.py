"""``edgeload demo``: sample clips made once, replayed live, a table and a contact sheet."""

from __future__ import annotations

import cv2
from _media import clip, media_dir

from edgeload.cli.main import main


def test_demo_with_sample_clips(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    sheet = tmp_path / "sheet.png"
    assert main(["demo", "--seconds", "2.5", "--size", "96x64", "--out", str(sheet)]) == 0
    out = capsys.readouterr().out
    assert "batches/s" in out and "age p50" in out and "drops" in out and "mem" in out
    for cam in range(4):
        assert f"sample-cam{cam}.mp4" in out
    assert out.count(" streaming ") == 4
    clips = sorted((tmp_path / "cache" / "edgeload" / "demo").glob("*.mp4"))
    assert [p.name for p in clips] == [f"sample-cam{i}.mp4" for i in range(4)]
    image = cv2.imread(str(sheet))
    assert image.shape == (128, 192, 3)  # 2 x 2 tiles of 96x64
    assert image.std() > 5  # pictures, not a blank sheet


def test_demo_with_user_sources(tmp_path_factory, tmp_path, capsys):
    path = clip(media_dir(tmp_path_factory), size=(160, 120), fps=30, seconds=1.0)
    sheet = tmp_path / "one.png"
    assert main(["demo", str(path), "--seconds", "5", "--size", "64x48", "--out", str(sheet)]) == 0
    out = capsys.readouterr().out
    assert " ended " in out and "batches 30," in out
    assert cv2.imread(str(sheet)).shape == (48, 64, 3)


def test_demo_reports_a_bad_source(capsys):
    assert main(["demo", "/no/such/clip.mp4", "--seconds", "1"]) == 2
    assert "'/no/such/clip.mp4' does not exist" in capsys.readouterr().err
