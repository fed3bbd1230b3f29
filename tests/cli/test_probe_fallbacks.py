"""``edgeload probe`` lists what this box's torch and OpenCV lack and what edgeload does instead."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import cv2
from torch.utils.data._utils import worker

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "platforms"


def _probe(*args, **env):
    return subprocess.run(
        [sys.executable, "-m", "edgeload", "probe", *args],
        capture_output=True,
        text=True,
        timeout=300,  # importing torch under emulation (the nox arm64 session) is slow
        env={**os.environ, **env},
    )


def test_probe_json_lists_exactly_what_this_box_lacks():
    out = _probe("--json", EDGELOAD_STALL_GUARD="0")
    assert out.returncode == 0, out.stderr
    lacks = [f["lacks"] for f in json.loads(out.stdout)["fallbacks"]]
    assert any("worker._RNG" in lack for lack in lacks) == (not hasattr(worker, "_RNG"))
    cv2_version = tuple(int(n) for n in re.findall(r"\d+", cv2.__version__)[:3])
    has_timeouts = hasattr(cv2, "CAP_PROP_READ_TIMEOUT_MSEC") and cv2_version >= (4, 5, 2)
    assert any("open/read timeouts" in lack for lack in lacks) == (not has_timeouts)
    assert any("CAP_PROP_N_THREADS" in lack for lack in lacks) == (
        not hasattr(cv2, "CAP_PROP_N_THREADS")
    )


def test_probe_prints_the_stall_guard_where_the_timeouts_are_missing():
    out = _probe(EDGELOAD_STALL_GUARD="1")
    assert out.returncode == 0, out.stderr
    assert "fallbacks (what this box lacks -> what edgeload does instead)" in out.stdout
    assert "-> the stall guard cuts" in out.stdout


def test_a_board_tree_has_no_fallbacks_to_ask_about():
    out = _probe("--json", "--root", str(FIXTURES / "jetson-orin-nano"))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["fallbacks"] == []
