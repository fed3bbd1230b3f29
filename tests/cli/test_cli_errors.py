"""The command line's answers to bad input, and what ``edgeload probe`` says: run as a
user runs them, in a real subprocess.

A bad input is one line on stderr (``edgeload CMD: ...``), exit status 2, no traceback;
probe's rows and its plan tell one story.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "platforms"


def edgeload(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "edgeload", *args], capture_output=True, text=True, timeout=120
    )


def _one_line_error(out: subprocess.CompletedProcess[str], command: str) -> str:
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr + out.stdout
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith(f"edgeload {command}: ")
    return lines[0]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("demo", "--size", "0x0", "--seconds", "1"), "--size must look like 640x640, both > 0"),
        (("demo", "--size", "wide"), "--size must look like 640x640"),
        (("demo", "/no/such/clip.mp4", "--seconds", "1"), "'/no/such/clip.mp4' does not exist"),
        (("demo", "ftp://cam.local/live", "--seconds", "1"), "unknown scheme 'ftp'"),
        (("demo", "--seconds", "-1"), "--seconds must be a finite number > 0"),
        (("demo", "--seconds", "soon"), "invalid float value: 'soon'"),
        (("probe", "--streams", "0"), "--streams must be >= 1"),
        (("probe", "--root", "/no/such/tree"), "is not a directory"),
        (("probe", "--frame", "0x0"), "frame size must be positive"),
        (("probe", "--source", "/no/such/clip.mp4"), "'/no/such/clip.mp4' does not exist"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, says):
    line = _one_line_error(edgeload(*args), args[0])
    assert says in line


def _probe(board: str, *extra: str) -> str:
    out = edgeload("probe", "--root", str(FIXTURES / board), *extra)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _row(text: str, name: str) -> str:
    return next(line for line in text.splitlines() if line.strip().startswith(name))


@pytest.mark.parametrize("board", ["jetson-agx-orin", "jetson-nano", "rpi4", "x86-desktop"])
def test_hardware_decode_and_the_plans_decode_agree(board):
    text = _probe(board)
    hw, decode = _row(text, "hw decode"), _row(text, "decode ")
    assert "none found in this tree" in hw  # a tree holds no GStreamer plugins ...
    # ... so the plan does not claim a hardware decoder was found
    assert "has GStreamer hardware decode" not in decode
    if "gstreamer" in decode:
        assert "hardware decoders are not in this tree" in decode


def test_unknown_ram_is_named_as_assumed_in_the_plan():
    text = _probe("jetson-agx-orin")
    assert "unknown total" in _row(text, "memory ")
    prefetch = _row(text, "prefetch")
    assert "of an assumed 1024.0 MiB (RAM unknown)" in prefetch
    assert "MiB available" not in prefetch


@pytest.mark.parametrize(
    ("board", "release"),
    [("jetson-nano", "L4T R32.6.1"), ("jetson-xavier-nx", "L4T R32.7.1"),
     ("jetson-tx2", "L4T R32")],
)  # fmt: skip
def test_jetpack_4_boards_are_told_they_are_unsupported(board, release):
    text = _probe(board)
    note = f"this board's JetPack ({release}, JetPack 4) is not supported; JetPack 5 or 6 is needed"
    head, _, plan = text.partition("\nplan\n")
    assert note in head and note in plan
    data = json.loads(_probe(board, "--json"))
    assert any(note in n for n in data["notes"]) and any(note in n for n in data["plan"]["notes"])


@pytest.mark.parametrize("board", ["jetson-agx-orin", "jetson-orin-nano", "rpi4"])
def test_supported_boards_get_no_jetpack_note(board):
    assert "is not supported" not in _probe(board)


def test_one_bad_source_keeps_the_others_report_and_is_named(tmp_path):
    missing = str(tmp_path / "gone.mp4")
    out = edgeload("probe", "--source", "rtsp://127.0.0.1:8554/cam", "--source", missing,
                   "--source", "3")  # fmt: skip
    line = _one_line_error(out, "probe")
    assert f"--source {missing}: video file '{missing}' does not exist" in line
    assert "plan" in out.stdout
    assert "source rtsp://127.0.0.1:8554/cam\n  rtsp via" in out.stdout
    assert "source 3\n  device via" in out.stdout
    assert f"source {missing}\n  cannot be used: video file '{missing}'" in out.stdout
    as_json = edgeload("probe", "--json", "--source", missing, "--source", "3")
    assert as_json.returncode == 2
    sources = json.loads(as_json.stdout)["sources"]
    assert "does not exist" in sources[0]["error"] and sources[1]["kind"] == "device"
