"""Shared fixtures. ``_no_leaks`` runs around every test in the suite."""

from __future__ import annotations

import os
import threading
import time

import psutil
import pytest

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


# --- hardware markers: `cuda` (GPU memory modes) --------------------------------------


def pytest_runtest_setup(item):
    """Skip ``cuda`` tests without usable CUDA; fail them when EDGELOAD_REQUIRE_CUDA=1."""
    if item.get_closest_marker("cuda") is None:
        return
    from edgeload.cuda.status import cuda_status

    status = cuda_status()
    if status.usable:
        return
    if os.environ.get("EDGELOAD_REQUIRE_CUDA") == "1":
        pytest.fail(f"EDGELOAD_REQUIRE_CUDA=1 but CUDA is not usable: {status.reason}")
    pytest.skip(f"needs CUDA: {status.reason}")
