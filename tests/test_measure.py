"""Memory and CPU measurement over a real process tree."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest

from edgeload.measure import (
    PeakPss,
    percentile,
    smaps_pss,
    tree_cpu_seconds,
    tree_memory,
    tree_pss_bytes,
)


def test_pss_counts_a_child_process():
    code = "import numpy as np, time; a = np.ones(64 << 20, np.uint8); print(1, flush=True); time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == b"1"
        # This process's own PSS read at the same moment, not before the child started:
        # a busy test process frees or takes a few MiB in between.
        with_child = tree_pss_bytes()
        alone = smaps_pss()["Pss"]
        assert with_child - alone > 60 << 20  # the child's 64 MiB of touched pages
    finally:
        child.kill()
        child.wait(timeout=10)
        child.stdout.close()


def _sleeper(code: str) -> subprocess.Popen[bytes]:
    """A process that runs ``code``, says so, and sleeps until killed."""
    child = subprocess.Popen(
        [sys.executable, "-c", f"{code}; print(1, flush=True); import time; time.sleep(60)"],
        stdout=subprocess.PIPE,
    )
    assert child.stdout is not None and child.stdout.readline().strip() == b"1"
    return child


def _stop(child: subprocess.Popen[bytes]) -> None:
    child.kill()
    child.wait(timeout=10)
    assert child.stdout is not None
    child.stdout.close()


def _filesystem_of(path: str) -> str:
    """The type of the filesystem ``path`` is on (the longest mount point above it)."""
    real, best, kind = os.path.realpath(path), "", ""
    with open("/proc/self/mounts", encoding="utf-8") as mounts:
        for line in mounts:
            fields = line.split()
            point = fields[1].replace("\\040", " ")
            inside = real == point or real.startswith(point.rstrip("/") + "/")
            if inside and len(point) >= len(best):
                best, kind = point, fields[2]
    return kind


def _map_pages(path: str) -> str:
    """Code that maps ``path`` read-only and touches each of its pages (as a library's
    pages are mapped and touched by every process that loads it)."""
    return (
        f"import mmap; f = open({path!r}, 'rb'); m = mmap.mmap(f.fileno(), 0, "
        "prot=mmap.PROT_READ); t = sum(m[i] for i in range(0, len(m), mmap.PAGESIZE))"
    )


@pytest.mark.skipif("Pss_Anon" not in smaps_pss(), reason="this kernel does not split PSS")
def test_own_memory_is_not_moved_by_another_process_mapping_the_same_pages(tmp_path):
    # A process's PSS falls when an unrelated one maps the same file pages (torch's and
    # cv2's libraries on a shared box); the part it allocated itself (anonymous + shared
    # memory: what autotune's ceiling reads) stays.  A file of the test's own, so no
    # other process on the box maps it and moves the figures.
    if _filesystem_of(str(tmp_path)) in ("tmpfs", "ramfs"):
        pytest.skip("the temp directory is in memory: its file pages count as shared memory")
    pages = tmp_path / "pages.bin"
    pages.write_bytes(b"\x01" * (24 << 20))
    measured = _sleeper(
        f"{_map_pages(str(pages))}; import numpy as np; a = np.ones(32 << 20, np.uint8)"
    )
    others = []
    try:
        pss_before, own_before = tree_memory(measured.pid)
        assert own_before > 32 << 20
        others = [_sleeper(_map_pages(str(pages))) for _ in range(2)]  # not in its tree
        pss_after, own_after = tree_memory(measured.pid)
        assert pss_before - pss_after > 12 << 20  # its share of the 24 MiB: all, then a third
        assert abs(own_after - own_before) < 2 << 20
        assert own_after <= pss_after
    finally:
        for child in [measured, *others]:
            _stop(child)


def test_peak_sampler_sees_a_transient_allocation():
    with PeakPss(interval_s=0.01) as mem:
        before, own_before = tree_memory()
        block = np.ones(96 << 20, np.uint8)
        time.sleep(0.1)
        del block
    # The block is anonymous memory: its own part sees nearly all of it. The whole PSS
    # also moves with how many other processes share this one's libraries (a busy box
    # starting other Pythons lowers it), so it gets a wider margin.
    assert mem.peak_own_bytes - own_before > 80 << 20
    assert mem.peak_bytes - before > 48 << 20
    assert mem.samples >= 3


def test_cpu_seconds_grow_with_work():
    start = tree_cpu_seconds()
    deadline = time.process_time() + 0.2
    while time.process_time() < deadline:
        pass
    assert tree_cpu_seconds() - start >= 0.15


@pytest.mark.parametrize(("q", "want"), [(0, 1.0), (50, 2.5), (100, 4.0), (25, 1.75)])
def test_percentile(q, want):
    assert percentile([4.0, 1.0, 3.0, 2.0], q) == pytest.approx(want)


def test_percentile_of_nothing_is_nan():
    assert percentile([], 50) != percentile([], 50)


def test_run_measured_returns_output_and_the_childs_peak():
    from edgeload.measure import run_measured

    code = (
        "import numpy as np, time; a = np.ones(64 << 20, np.uint8); time.sleep(0.3); print('done')"
    )
    out, peak = run_measured([sys.executable, "-c", code], timeout_s=60)
    assert out.strip() == "done"
    assert peak > 60 << 20


def test_run_measured_names_a_failure_and_kills_on_timeout():
    from edgeload.measure import run_measured

    with pytest.raises(RuntimeError, match="exit code 3"):
        run_measured([sys.executable, "-c", "raise SystemExit(3)"], timeout_s=60)
    with pytest.raises(subprocess.TimeoutExpired):
        run_measured([sys.executable, "-c", "import time; time.sleep(30)"], timeout_s=0.5)


def test_run_sampled_hands_back_the_samplers_figures():
    from edgeload.measure import PeakPss, run_sampled

    code = "import numpy as np, time; a = np.ones(64 << 20, np.uint8); time.sleep(0.3); print('ok')"
    out, mem = run_sampled([sys.executable, "-c", code], timeout_s=60, sampler=PeakPss)
    assert out.strip() == "ok"
    assert isinstance(mem, PeakPss)
    assert mem.peak_bytes > 60 << 20
