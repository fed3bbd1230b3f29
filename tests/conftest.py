"""Shared fixtures. ``_no_leaks`` runs around every test in the suite."""

from __future__ import annotations

import os
import signal
import threading
import time

import psutil
import pytest
from _require import (
    GST_OPENCV_PROBE,
    RTSP_SERVER_PROBE,
    SYSTEM_PYTHON,
    missing,
    system_python_has,
)

SHM_DIR = "/dev/shm"
LEAK_GRACE_S = 2.0
# multiprocessing's helper processes live for the whole session by design.
_SESSION_HELPERS = ("forkserver", "resource_tracker")


def _edgeload_threads() -> set[int]:
    return {
        t.ident
        for t in threading.enumerate()
        if t.name.startswith("edgeload") and t.is_alive() and t.ident is not None
    }


def _children() -> set[int]:
    pids = set()
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                continue
            # The helper itself is exempt, not what it forks (forkserver workers).
            helper = child.ppid() == os.getpid() and any(
                name in " ".join(child.cmdline()) for name in _SESSION_HELPERS
            )
        except psutil.NoSuchProcess:
            continue
        if not helper:
            pids.add(child.pid)
    return pids


def _shm_entries() -> set[str]:
    # Only this process's segments: other test runs may share the machine's /dev/shm.
    prefix = f"edgeload-{os.getpid()}-"
    try:
        return {name for name in os.listdir(SHM_DIR) if name.startswith(prefix)}
    except FileNotFoundError:
        return set()


def _leaks(threads: set[int], children: set[int], shm: set[str]) -> list[str]:
    found = []
    new_threads = _edgeload_threads() - threads
    if new_threads:
        names = [t.name for t in threading.enumerate() if t.ident in new_threads]
        found.append(f"edgeload threads still alive: {names}")
    new_children = _children() - children
    if new_children:
        found.append(f"child processes still alive: {sorted(new_children)}")
    new_shm = _shm_entries() - shm
    if new_shm:
        found.append(f"new {SHM_DIR} entries: {sorted(new_shm)}")
    return found


@pytest.fixture(autouse=True)
def _no_leaks():
    """Fail a test that leaves an edgeload thread, a child process or a shm segment."""
    before = (_edgeload_threads(), _children(), _shm_entries())
    yield
    deadline = time.monotonic() + LEAK_GRACE_S
    while (found := _leaks(*before)) and time.monotonic() < deadline:
        time.sleep(0.05)
    if found:
        pytest.fail("leak after test: " + "; ".join(found), pytrace=False)


@pytest.fixture(autouse=True)
def _no_tuned_profile(monkeypatch, tmp_path):
    """A fresh device: no EDGELOAD_PROFILE and a private, empty user config dir.

    A developer's own tuned profile must never change what a test plans.
    """
    monkeypatch.delenv("EDGELOAD_PROFILE", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))


# --- real components: one table from marker to its check and its switch ---------------


def _cuda_missing() -> str | None:
    from edgeload.cuda.status import cuda_status

    status = cuda_status()
    return None if status.usable else f"needs CUDA: {status.reason}"


def _gstreamer_missing() -> str | None:
    from edgeload import probe

    opencv = probe().opencv  # the live probe reads cv2's build information
    if opencv is not None and opencv.gstreamer:
        return None
    # The main venv's pip OpenCV has no GStreamer by design: scripts/test.sh runs these
    # tests again with Debian's OpenCV. A skip here is honest only while that one exists.
    if system_python_has(GST_OPENCV_PROBE):
        pytest.skip(
            "this OpenCV has no GStreamer (scripts/test.sh runs it in the nox bookworm session)"
        )
    return f"neither this OpenCV nor {SYSTEM_PYTHON}'s has GStreamer"


def _rtsp_missing() -> str | None:
    if system_python_has(RTSP_SERVER_PROBE):
        return None
    return f"needs Debian's gst-rtsp-server for {SYSTEM_PYTHON} (scripts/_system_deps.sh)"


def _libcamera_missing() -> str | None:
    import shutil

    from edgeload.video._gstreamer import has_element

    if shutil.which("cam") and has_element("libcamerasrc"):
        return None
    return (
        "needs libcamera's cam tool and GStreamer element (libcamera-tools, gstreamer1.0-libcamera)"
    )


# marker -> (the component's EDGELOAD_REQUIRE_<NAME>, its check: None when present, else why not)
MARKERS = {
    "cuda": ("CUDA", _cuda_missing),
    "gstreamer": ("GSTREAMER", _gstreamer_missing),
    "rtsp": ("RTSP", _rtsp_missing),
    "libcamera": ("LIBCAMERA", _libcamera_missing),
}
_checked: dict[str, str | None] = {}


def pytest_runtest_setup(item):
    """A test marked with a real component skips without it, or fails where it is required.

    ``tests/_require.py`` says when a component is required (its switch, or ``CI``).
    """
    for marker, (name, check) in MARKERS.items():
        if item.get_closest_marker(marker) is None:
            continue
        if marker not in _checked:
            _checked[marker] = check()
        reason = _checked[marker]
        if reason is not None:
            missing(name, reason)


@pytest.fixture
def sigint_reaches_children():
    """Children this test starts get Python's Ctrl-C handling, however pytest was started.

    A shell's background job (``cmd &`` in a script, a CI step) starts with SIGINT
    ignored, and children inherit that: Python then installs no KeyboardInterrupt
    handler, and a test that sends SIGINT sees a program that ignores it. A handled
    signal is reset to the default on exec, so handling it here fixes the children.
    """
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)
