"""Ctrl-C at every point of one loader step, for the StreamLoader and the DataLoader.

CPython raises Ctrl-C's KeyboardInterrupt in the main thread wherever it next checks
for signals: at a Python function's entry and after a call into C returns. Under load
a signal can land on any of them, and two did hang the StreamLoader (issue #13): one
raised inside the slot pool's weak-reference callback, where Python prints it as
"Exception ignored" and drops it, so the program ran on; one raised inside
``Condition.__enter__`` after it took the prefetch queue's lock, so ``close()`` waited
for that lock forever. The same hazard hung the DataLoader in ``queue.Queue.put``.

``_interrupt_step.py`` raises the interrupt at each point of one ``next()`` in turn
(a fresh loader each time; the step drops the previous batch, as a ``for`` loop does).
Every trial must end with that KeyboardInterrupt (not lost, not turned into another
error), the loader closed within ``CLOSE_WITHIN_S`` and no edgeload thread or
``/dev/shm`` segment left. A close that hangs ends the script with every stack.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _media import clip, media_dir

from edgeload.pipeline.slots import SlotPool

SCRIPT = Path(__file__).with_name("_interrupt_step.py")
CLOSE_WITHIN_S = 10.0  # a close normally takes well under a second: 10x and more
MIN_POINTS = 20  # one step has 50-90 points; fewer means the hook saw nothing
TIMEOUT_S = 900  # the whole run on a loaded 2-core box (a hung trial ends after 60 s)


def run_points(kind: str, video: Path, tmp_path: Path) -> list[str]:
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    env.pop("EDGELOAD_PROFILE", None)
    env["PYTHONPATH"] = os.pathsep.join(sys.path)  # this checkout of edgeload
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), kind, str(video)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env=env,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{kind}: exit {proc.returncode} (a hung close?):\n{out[-6000:]}"
    return proc.stdout.splitlines()


def check(kind: str, lines: list[str]) -> None:
    done = [line for line in lines if line.startswith("done ")]
    assert done, f"{kind}: the script did not finish:\n" + "\n".join(lines[-20:])
    points = int(done[0].split()[1])
    assert points >= MIN_POINTS, f"{kind}: only {points} points in one step"
    bad = []
    for line in lines:
        if line[:1].isdigit():
            _k, outcome, close_s, _where, threads, segments = line.split(" ")
            slow = float(close_s) > CLOSE_WITHIN_S
            if outcome != "ok" or slow or threads != "-" or segments != "-":
                bad.append(line)
    assert not bad, (
        f"{kind}: {len(bad)} of {points} interrupt points went wrong "
        "(k outcome close_s where threads segments):\n" + "\n".join(bad)
    )


@pytest.fixture
def video(tmp_path_factory):
    return clip(media_dir(tmp_path_factory), size=(160, 120), fps=30, seconds=2.0)


@pytest.mark.timeout(TIMEOUT_S + 60)
@pytest.mark.parametrize("kind", ["streams", "thread"])
def test_ctrl_c_at_every_point_of_a_step_is_raised_and_the_loader_closes(kind, video, tmp_path):
    check(kind, run_points(kind, video, tmp_path))


@pytest.mark.slow
@pytest.mark.timeout(TIMEOUT_S + 60)
@pytest.mark.parametrize("kind", ["process", "streams-waiting"])
def test_ctrl_c_at_every_point_of_a_slower_step(kind, video, tmp_path):
    # Process workers start in seconds; a consumer waiting for a camera loops in its
    # poll. Both take minutes over every point on a loaded box: the long run has them.
    check(kind, run_points(kind, video, tmp_path))


def test_dropping_a_leased_batch_runs_no_python_code_and_its_slot_comes_back():
    # The drop runs in the consumer's thread; a Python frame there is a point where
    # Ctrl-C is raised and, inside a weakref callback, lost.
    pool = SlotPool((4, 4), np.uint8, count=3)
    try:
        view = pool.lease(pool.acquire(timeout_s=1.0))
        entered: list[str] = []
        sys.setprofile(lambda frame, event, arg: entered.append(frame.f_code.co_name)
                       if event == "call" else None)  # fmt: skip
        try:
            del view
        finally:
            sys.setprofile(None)
        assert entered == []
        stats = pool.stats()
        assert (stats.leased, stats.free) == (0, 3)
    finally:
        pool.close()
