"""Faults through both loaders, each ending in a clear error or a clean stop.

The leak check in conftest.py (no edgeload thread, child process or shared-memory
segment of this process left) runs after every test here; a few tests also check at
the point where the promise is made, before the test ends.
"""

from __future__ import annotations

import gc
import os
import signal
import threading
import time
import weakref
from pathlib import Path

import numpy as np
import pytest
from _media import clip, media_dir
from _servers import wait_until
from torch.utils.data import Dataset

from edgeload import DataLoader, WorkerError, WorkerTimeout
from edgeload.video import StreamLoader, VideoSource

KINDS = ["thread", "process"]


def _segments() -> list[str]:
    return [n for n in os.listdir("/dev/shm") if n.startswith(f"edgeload-{os.getpid()}-")]


class Frames(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return np.full((16, 16, 3), i, np.uint8)


class DiesOnce(Frames):
    """Item 20 SIGKILLs its worker process the first time (a marker file remembers)."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __getitem__(self, i):
        if i == 20 and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        return super().__getitem__(i)


RELEASE = threading.Event()  # in a worker process, a fresh one nobody sets


class HangsOn(Frames):
    """Item 9 hangs for 60 s once ``armed`` exists (a file, so process workers see it)."""

    def __init__(self, armed: Path) -> None:
        self.armed = str(armed)

    def __getitem__(self, i):
        if i == 9 and os.path.exists(self.armed):
            RELEASE.wait(60)
        return super().__getitem__(i)


PROCESSES = {"num_workers": 2, "worker_kind": "process"}


def test_a_dead_workers_segments_go_when_the_loader_is_dropped_even_if_the_error_is_kept(
    tmp_path,
):
    loader = DataLoader(DiesOnce(tmp_path / "died"), batch_size=4, **PROCESSES)
    it = iter(loader)
    with pytest.raises(WorkerError, match="SIGKILL") as info:
        for _ in it:
            pass
    assert isinstance(info.value, RuntimeError)  # as torch reports a dead worker
    assert _segments()  # the loader is alive: its slots are too
    dropped = weakref.ref(loader)
    del it, loader
    gc.collect()
    # gc.collect() returns at once while another thread's collection (pytest-xdist's
    # I/O thread) is running, finalizers included: give that one time to finish.
    wait_until(lambda: dropped() is None and not _segments(), 30.0)
    assert dropped() is None, [type(r).__name__ for r in gc.get_referrers(dropped())]
    assert _segments() == []  # while this process lives and the error is kept
    assert info.value is not None


def test_a_worker_killed_while_filling_a_slot_does_not_cost_the_next_epoch(tmp_path):
    with DataLoader(DiesOnce(tmp_path / "died"), batch_size=4, **PROCESSES) as loader:
        with pytest.raises(WorkerError, match="SIGKILL"):
            list(loader)
        batches = list(loader)  # fresh workers; the killed task's slot came back
        assert [int(b[0, 0, 0, 0]) for b in batches] == list(range(0, 64, 4))


@pytest.mark.parametrize("kind", KINDS)
def test_a_sample_that_hangs_raises_worker_timeout_naming_the_worker_and_item(kind, tmp_path):
    # The timeout counts worker start-up too (as torch's does), which takes seconds for
    # processes on a loaded box: a first epoch with a long timeout starts the persistent
    # workers, and the second, with a short one, meets the hung sample.
    armed = tmp_path / "armed"
    loader = DataLoader(
        HangsOn(armed), batch_size=4, num_workers=2, worker_kind=kind, timeout=120,
        persistent_workers=True,
    )  # fmt: skip
    with loader:
        assert len(list(loader)) == 16
        armed.touch()
        loader.timeout = timeout = 3
        it = iter(loader)
        t0 = time.monotonic()
        with pytest.raises(WorkerTimeout, match=rf"timed out after {timeout} seconds") as info:
            for _ in it:
                pass
        assert time.monotonic() - t0 < 50.0  # the timeout, not the 60 s sample
        worker = info.value.worker or ""
        assert ("pid" in worker) if kind == "process" else worker.startswith("edgeload-")
        assert worker in str(info.value)
        assert f"{worker} on dataset index [8, 9, 10, 11]" in str(info.value)
        RELEASE.set()  # a thread cannot be killed: let it go (a process is terminated)
    RELEASE.clear()
    assert _segments() == []


@pytest.mark.parametrize("kind", KINDS)
def test_an_early_break_then_a_dropped_loader_leaves_nothing(kind):
    loader = DataLoader(Frames(), batch_size=4, num_workers=2, worker_kind=kind)
    for i, _batch in enumerate(loader):
        if i == 2:
            break
    del loader, _batch  # no close(): garbage collection must stop workers, free slots
    gc.collect()


@pytest.fixture(scope="module")
def video(tmp_path_factory):
    return clip(media_dir(tmp_path_factory), size=(160, 120), fps=30, seconds=1.0)


def test_a_stream_loader_broken_out_of_and_dropped_leaves_nothing(video):
    loader = StreamLoader([VideoSource(video, loop=True)] * 2, size=(32, 32), batch=2)
    for i, _batch in enumerate(loader):
        if i == 3:
            break
    del loader, _batch
    gc.collect()


_FILL_SCRIPT = """
import os, numpy as np, edgeload
data = [np.full((256, 1024), i, np.uint8) for i in range(64)]  # 1 MiB batches
loader = edgeload.DataLoader(data, batch_size=4, num_workers=2, worker_kind="process")
kept = []
try:
    for i, batch in enumerate(loader):
        kept.append(batch)  # the consumer keeps batches, so more memory is needed
        if i == 1:  # mid-epoch, something else fills /dev/shm to the last byte
            with open("/dev/shm/filler", "wb") as f:
                try:
                    while True:
                        f.write(bytes(1 << 16))
                        f.flush()
                except OSError:
                    pass
    print("DONE")
except Exception as exc:
    print("ERROR", type(exc).__name__, "--shm-size" in str(exc))
finally:
    loader.close()
    os.unlink("/dev/shm/filler")
print("LEFT", [n for n in os.listdir("/dev/shm") if n.startswith("edgeload-")])
"""


def test_a_dev_shm_that_fills_mid_epoch_ends_in_an_error_naming_shm_size(tmp_path):
    """A real 16 MiB tmpfs over /dev/shm in a private mount namespace, filled mid-epoch."""
    import shutil
    import subprocess
    import sys

    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) to mount a small /dev/shm")
    script = tmp_path / "fill.py"
    script.write_text(_FILL_SCRIPT)
    cmd = f"mount -t tmpfs -o size=16m tmpfs /dev/shm && exec {sys.executable} {script}"
    out = subprocess.run(
        ["unshare", "-m", "sh", "-c", cmd], capture_output=True, text=True, timeout=300
    )
    if out.returncode != 0 and "mount" in out.stderr and "LEFT" not in out.stdout:
        pytest.skip(f"cannot mount a tmpfs here: {out.stderr.strip()[:200]}")
    lines = out.stdout.splitlines()
    # Slots are backed when created (no SIGBUS later); the slots the kept batches need
    # after the fill cannot be made, and that fails with the fix named, not a crash;
    # nothing is left behind.
    assert lines[0] == "ERROR PlatformError True", out.stdout + out.stderr
    assert lines[-1] == "LEFT []"
