"""The command line, run as a user runs it: a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "platforms"
BOARDS = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())


def edgeload(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "edgeload", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_probe_on_this_machine_prints_platform_and_plan():
    out = edgeload("probe")
    assert out.returncode == 0, out.stderr
    for word in ("device", "cpu", "memory", "gpu", "opencv", "plan", "workers", "memory mode"):
        assert word in out.stdout


def test_probe_json_has_the_documented_keys():
    out = edgeload("probe", "--json", "--streams", "2", "--frame", "320x240")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    for key in ("family", "model", "soc", "l4t_release", "in_container", "opencv"):
        assert key in data
    assert data["cpu"]["online_count"] >= 1
    assert {"core_type", "count", "max_mhz"} <= set(data["cpu"]["clusters"][0])
    assert {"total_bytes", "available_bytes", "limit_bytes", "shm_bytes", "swap_bytes"} <= set(
        data["memory"]
    )
    assert {"present", "integrated", "io_coherent"} <= set(data["gpu"])
    assert data["profile"]["source"].startswith("built-in")
    plan = data["plan"]
    assert {
        "worker_kind",
        "num_workers",
        "memory_mode",
        "prefetch_bytes",
        "threads",
        "reasons",
    } <= set(plan)
    assert plan["num_workers"] == 2
    assert plan["slot_bytes"] == 2 * 320 * 240 * 3


@pytest.mark.parametrize("board", BOARDS)
def test_probe_under_root_for_every_fixture(board):
    out = edgeload("probe", "--root", str(FIXTURES / board), "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["root"] == str(FIXTURES / board)
    assert data["plan"]["memory_mode"] in ("host", "pinned", "mapped", "managed")
    text = edgeload("probe", "--root", str(FIXTURES / board))
    assert text.returncode == 0, text.stderr
    assert data["model"] in text.stdout


def test_missing_root_is_a_one_line_error_with_status_2(tmp_path):
    out = edgeload("probe", "--root", str(tmp_path / "nowhere"))
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "nowhere" in lines[0] and "not a directory" in lines[0]


def test_bad_frame_argument_is_rejected():
    out = edgeload("probe", "--frame", "640by480")
    assert out.returncode == 2
    assert "WIDTHxHEIGHT" in out.stderr


def test_help_lists_commands_and_no_command_prints_help():
    out = edgeload("--help")
    assert out.returncode == 0
    assert "probe" in out.stdout
    bare = edgeload()
    assert bare.returncode == 2
    assert "COMMAND" in bare.stdout


@pytest.mark.parametrize(
    ("board", "pipeline"),
    [
        ("jetson-agx-orin", "nvarguscamerasrc sensor-id=0 ! video/x-raw(memory:NVMM)"),
        ("rpi4", "libcamerasrc ! video/x-raw,format=I420"),
    ],
)
def test_probe_under_root_shows_the_boards_pipeline_not_this_machines(board, pipeline):
    # Whatever OpenCV this machine has (pip's has no GStreamer), a board's tree is shown
    # with the board's own OpenCV and elements.
    out = edgeload("probe", "--root", str(FIXTURES / board), "--json", "--source", "csi://0",
                   "--source", "rtsp://cam/x")  # fmt: skip
    assert out.returncode == 0, out.stderr
    csi, rtsp = json.loads(out.stdout)["sources"]
    assert (csi["backend"], rtsp["backend"]) == ("gstreamer", "gstreamer")
    assert csi["open_string"].startswith(pipeline)
    assert ("nvvidconv" in rtsp["open_string"]) == board.startswith("jetson")


def test_probe_shows_what_a_loader_would_open_for_a_source(tmp_path):
    out = edgeload("probe", "--json", "--source", "rtsp://127.0.0.1:8554/cam", "--source", "0")
    assert out.returncode == 0, out.stderr
    rtsp, cam = json.loads(out.stdout)["sources"]
    assert (rtsp["uri"], rtsp["kind"]) == ("rtsp://127.0.0.1:8554/cam", "rtsp")
    assert rtsp["backend"] in ("ffmpeg", "gstreamer")
    assert "127.0.0.1:8554/cam" in rtsp["open_string"]
    assert cam["kind"] == "device"
    text = edgeload("probe", "--source", "rtsp://127.0.0.1:8554/cam")
    assert "source rtsp://127.0.0.1:8554/cam" in text.stdout
    missing = edgeload("probe", "--source", str(tmp_path / "nope.mp4"))
    assert missing.returncode == 2
    assert "nope.mp4" in missing.stderr and "does not exist" in missing.stderr
