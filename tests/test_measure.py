"""Memory and CPU measurement over a real process tree."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest

from edgeload.measure import PeakPss, percentile, tree_cpu_seconds, tree_pss_bytes


def test_pss_counts_a_child_process():
    alone = tree_pss_bytes()
    code = "import numpy as np, time; a = np.ones(64 << 20, np.uint8); print(1, flush=True); time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == b"1"
        with_child = tree_pss_bytes()
        assert with_child - alone > 60 << 20  # the child's 64 MiB of touched pages
    finally:
        child.kill()
        child.wait(timeout=10)
        child.stdout.close()


def test_peak_sampler_sees_a_transient_allocation():
    with PeakPss(interval_s=0.01) as mem:
        before = mem.sample()
        block = np.ones(96 << 20, np.uint8)
        time.sleep(0.1)
        del block
    assert mem.peak_bytes - before > 80 << 20
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
