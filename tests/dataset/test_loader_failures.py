"""Failures through the DataLoader API: a raising sample, skipping, a hang, a killed worker."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import torch
from _datasets import DictDS, N, ShardedIterDS
from torch.utils.data import Dataset

import edgeload
from edgeload import ClosedError, DataLoader, WorkerError, WorkerTimeout

BAD = {5, 17}


class FlakyDS(Dataset):
    """Samples in BAD raise, like a corrupt file."""

    def __len__(self):
        return N

    def __getitem__(self, i):
        if i in BAD:
            raise OSError(f"corrupt record {i}")
        return torch.full((2,), i)


class SlowDS(Dataset):
    """Sample 3 takes ``delay_s``; the rest are instant."""

    def __init__(self, delay_s):
        self.delay_s = delay_s

    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i == 3:
            time.sleep(self.delay_s)
        return i


class KillerDS(Dataset):
    """Sample 6 kills its worker process, like the OOM killer."""

    def __len__(self):
        return 12

    def __getitem__(self, i):
        if i == 6:
            os.kill(os.getpid(), signal.SIGKILL)
        return i


class HandleError(Exception):
    """Carries an open lock, as an error holding a file or socket handle would: the
    instance cannot be pickled back from a worker process, its type can."""

    def __init__(self, index):
        super().__init__(f"record {index} unreadable")
        self.handle = threading.Lock()


class HandleErrorDS(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i == 3:
            raise HandleError(i)
        return i


def bad_init(worker_id):
    raise RuntimeError(f"cannot open the shard of worker {worker_id}")


MODES = [
    pytest.param({"num_workers": 0}, id="main"),
    pytest.param({"num_workers": 2, "worker_kind": "thread"}, id="threads"),
]
PROCESS = {"num_workers": 2, "worker_kind": "process", "multiprocessing_context": "fork"}


@pytest.mark.parametrize("mode", [*MODES, pytest.param(PROCESS, id="processes")])
def test_a_raising_sample_raises_worker_error_naming_it(mode):
    with DataLoader(FlakyDS(), batch_size=4, **mode) as loader:
        it = iter(loader)
        assert next(it).tolist()[0] == [0, 0]
        with pytest.raises(WorkerError, match=r"sample 5 .*OSError: corrupt record 5") as info:
            next(it)
        assert info.value.index == 5
        assert "corrupt record 5" in info.value.traceback_text
        assert isinstance(info.value.__cause__, OSError)
        assert isinstance(info.value, OSError)  # `except OSError` catches it, as with torch


@pytest.mark.parametrize("mode", MODES)
def test_skip_drops_bad_samples_and_counts_them(mode):
    with DataLoader(FlakyDS(), batch_size=4, on_error="skip", max_skips=2, **mode) as loader:
        got = [int(v) for b in loader for v in b[:, 0]]
        assert got == [i for i in range(N) if i not in BAD]
        stats = loader.stats()
        assert stats["samples_skipped"] == 2
        assert [index for index, _ in stats["skipped"]] == sorted(BAD)


def test_a_batch_whose_samples_all_fail_is_left_out():
    with DataLoader(FlakyDS(), batch_size=1, on_error="skip", max_skips=5) as loader:
        got = [int(b[0, 0]) for b in loader]
    assert got == [i for i in range(N) if i not in BAD]


def test_more_skips_than_allowed_raises():
    loader = DataLoader(FlakyDS(), batch_size=4, on_error="skip", max_skips=1)
    with loader, pytest.raises(WorkerError, match=r"sample 17 .*max_skips=1") as info:
        list(loader)
    assert info.value.index == 17


def test_a_hung_sample_raises_worker_timeout():
    with DataLoader(SlowDS(1.0), batch_size=2, timeout=0.2, num_workers=1) as loader:
        it = iter(loader)
        assert next(it).tolist() == [0, 1]
        start = time.monotonic()
        with pytest.raises(WorkerTimeout, match=r"timed out after 0\.2 seconds"):
            next(it)
        assert time.monotonic() - start < 0.9


def test_a_killed_worker_process_is_reported():
    loader = DataLoader(KillerDS(), batch_size=2, **PROCESS)
    with loader, pytest.raises(WorkerError, match=r"SIGKILL|signal 9|killed"):
        list(loader)


@pytest.mark.parametrize("mode", [MODES[1], pytest.param(PROCESS, id="processes")])
def test_worker_init_fn_failure_is_reported(mode):
    loader = DataLoader(DictDS(), batch_size=4, worker_init_fn=bad_init, **mode)
    with loader, pytest.raises(WorkerError, match="cannot open the shard of worker"):
        list(loader)


def test_worker_info_in_thread_workers():
    seen = {}

    class Probe(Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            ours, theirs = edgeload.get_worker_info(), torch.utils.data.get_worker_info()
            seen[i] = (ours.id, ours.num_workers, theirs.id, threading.current_thread().name)
            return i

    with DataLoader(Probe(), batch_size=2, num_workers=2, worker_kind="thread") as loader:
        list(loader)
    assert {i: v[:3] for i, v in seen.items()} == {
        i: ((i // 2) % 2, 2, (i // 2) % 2) for i in range(8)
    }
    assert all(v[3].startswith("edgeload-") for v in seen.values())
    assert edgeload.get_worker_info() is None
    assert torch.utils.data.get_worker_info() is None


def test_close_stops_workers_and_use_after_close_raises():
    loader = DataLoader(ShardedIterDS(), batch_size=2, num_workers=2, worker_kind="thread")
    it = iter(loader)
    next(it)
    loader.close()
    loader.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("edgeload-loader")]
    with pytest.raises(ClosedError):
        iter(loader)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_workers": -1}, "num_workers option should be non-negative; got -1"),
        ({"worker_kind": "gpu"}, "worker_kind must be one of"),
        ({"on_error": "ignore"}, "on_error must be 'raise' or 'skip'"),
        ({"max_skips": -2}, "max_skips must be an int >= 0"),
        ({"timeout": -1}, "timeout option should be non-negative"),
        ({"shuffle": True, "sampler": [1, 2]}, "mutually exclusive with shuffle"),
        ({"num_workers": 0, "persistent_workers": True}, "persistent_workers option needs"),
        ({"batch_sampler": [[0]], "batch_size": 3}, "batch_sampler option is mutually"),
    ],
)
def test_bad_arguments_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DataLoader(DictDS(), **kwargs)


def test_iterable_dataset_rejects_shuffle_like_torch():
    with pytest.raises(ValueError, match="expected unspecified shuffle option"):
        DataLoader(ShardedIterDS(), shuffle=True)


@pytest.mark.parametrize("mode", ["pinned", "mapped", "managed"])
def test_a_gpu_memory_mode_without_cuda_is_refused_by_the_constructor(mode):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(edgeload.PlatformError, match=rf"memory_mode='{mode}'.*'host'"):
        DataLoader(DictDS(), batch_size=4, num_workers=1, memory_mode=mode)


# Explicit process workers over a /dev/shm too small for one batch of ``data``
_EXPLICIT_PROCESS_WORKERS = """
explicit = edgeload.DataLoader(data, batch_size=4, num_workers=2, worker_kind="process",
                               multiprocessing_context="fork")
try:
    list(explicit)
    print("NO ERROR")
except edgeload.WorkerError as exc:
    print("ERROR", type(exc.__cause__).__name__, str(exc).splitlines()[0])
finally:
    explicit.close()
"""

_TINY_SHM_SCRIPT = (
    """
import numpy as np, edgeload
data = [np.zeros((512, 1024), np.uint8) for _ in range(16)]  # batches of 2 MiB, /dev/shm 1 MiB
"""
    + _EXPLICIT_PROCESS_WORKERS
    + """
auto = edgeload.DataLoader(data, batch_size=4, num_workers=2)
print("AUTO", len(list(auto)), auto.stats()["worker_kind"])
auto.close()
"""
)

# Samples default_collate batches (a str leaf: no slots): in a worker it stacks them
# straight into torch shared memory, which older torch (all of JetPack 5's) does not reserve first.
_TINY_SHM_COLLATE_SCRIPT = (
    """
import torch, edgeload
data = [{"x": torch.zeros((512, 1024), dtype=torch.uint8), "name": str(i)} for i in range(16)]
"""
    + _EXPLICIT_PROCESS_WORKERS
)


def _run_with_tiny_shm(script):
    """stdout lines of ``script`` run over a 1 MiB tmpfs on /dev/shm (a private mount
    namespace), or a skip where that cannot be made."""
    import shutil
    import subprocess
    import sys

    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) to mount a small /dev/shm")
    cmd = f"mount -t tmpfs -o size=1m tmpfs /dev/shm && exec {sys.executable} -c '{script}'"
    out = subprocess.run(
        ["unshare", "-m", "sh", "-c", cmd], capture_output=True, text=True, timeout=120
    )
    if "mount" in out.stderr and out.returncode != 0 and "ERROR" not in out.stdout:
        pytest.skip(f"cannot mount a tmpfs here: {out.stderr.strip()[:200]}")
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_a_dev_shm_too_small_for_process_workers_names_shm_size():
    """Docker's 64 MB /dev/shm, made real: a 1 MiB tmpfs over /dev/shm in a private mount
    namespace. Explicit process workers get an error naming --shm-size; auto uses threads."""
    lines = _run_with_tiny_shm(_TINY_SHM_SCRIPT)
    assert lines[0].startswith("ERROR PlatformError"), lines
    assert "--shm-size" in lines[0] and "worker_kind='thread'" in lines[0]
    assert lines[1] == "AUTO 4 thread"


def test_a_dev_shm_too_small_for_a_batch_collated_in_a_worker_names_shm_size():
    # Not a SIGBUS (a worker killed, the cause lost): the same PlatformError.
    lines = _run_with_tiny_shm(_TINY_SHM_COLLATE_SCRIPT)
    assert lines[0].startswith("ERROR PlatformError"), lines
    assert "--shm-size" in lines[0] and "worker_kind='thread'" in lines[0]


def test_an_error_that_cannot_leave_its_process_still_raises_its_type():
    # The exception stays in the worker; its type, text and traceback travel.
    loader = DataLoader(HandleErrorDS(), batch_size=2, **PROCESS)
    with loader, pytest.raises(HandleError) as info:
        list(loader)
    err = info.value
    assert isinstance(err, WorkerError)
    assert err.index == 3
    assert "Caught HandleError in DataLoader worker process 1 while loading sample 3" in str(err)
    assert "record 3 unreadable" in str(err)
    assert "raise HandleError(i)" in (err.traceback_text or "")
    assert err.__cause__ is None
