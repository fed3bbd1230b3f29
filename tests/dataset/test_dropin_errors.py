"""What torch's DataLoader raises, edgeload's raises too: same except clauses, same words.

Each case runs through both loaders; the comparison is the exception type a user's
``except`` catches and the key part of the message.
"""

from __future__ import annotations

import gc
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest
import torch
from torch.utils.data import Dataset

import edgeload
from edgeload import DataLoader, WorkerError

MODES = [
    pytest.param({"num_workers": 0}, id="main"),
    pytest.param({"num_workers": 2, "worker_kind": "thread"}, id="threads"),
    pytest.param({"num_workers": 2, "worker_kind": "process"}, id="processes"),
]


class TwoArgError(Exception):
    def __init__(self, code, detail):
        super().__init__(code, detail)


class Seen:
    """What a user sees of an exception, kept without it: its traceback holds the
    iterator's frames (and so its workers) until the cycle is collected, in both loaders."""

    def __init__(self, exc):
        self.types = type(exc).__mro__
        self.text = str(exc)
        self.index = getattr(exc, "index", None)
        self.traceback_text = getattr(exc, "traceback_text", None)


ERRORS = [
    NotImplementedError("not here"),
    KeyError("missing-key"),
    RuntimeError("broken"),
    FileNotFoundError(2, "no such file"),
    TwoArgError(3, "cannot be rebuilt from one message"),
]


class RaisesMany(Dataset):
    """Sample i raises ERRORS[i]: one loader shows every type (iteration goes on after
    an error, in both loaders)."""

    def __len__(self):
        return len(ERRORS)

    def __getitem__(self, i):
        raise ERRORS[i]


def _all_errors(cls, **kw):
    it = iter(cls(RaisesMany(), batch_size=None, **kw))
    seen = []
    for _ in ERRORS:
        try:
            next(it)
        except Exception as exc:
            seen.append(Seen(exc))
    del it
    gc.collect()
    return seen


@pytest.fixture(scope="module")
def torch_errors():
    # torch takes ~10 s to stop workers after an error: run it once, in workers and not.
    return {n: _all_errors(torch.utils.data.DataLoader, num_workers=n) for n in (0, 2)}


@pytest.mark.parametrize("mode", MODES)
def test_a_dataset_exception_keeps_its_type_as_with_torch(mode, torch_errors):
    ours = _all_errors(DataLoader, **mode)
    theirs = torch_errors[mode["num_workers"]]
    for k, exc in enumerate(ERRORS[:-1]):
        assert type(exc) in theirs[k].types
        assert type(exc) in ours[k].types  # the same `except` clause catches both
        assert WorkerError in ours[k].types
        assert ours[k].index == k
        assert type(exc).__name__ in ours[k].traceback_text
        if mode["num_workers"]:
            assert f"Caught {type(exc).__name__} in DataLoader worker" in ours[k].text
            assert f"Caught {type(exc).__name__} in DataLoader worker" in theirs[k].text
    # A type that takes more than a message: torch keeps it with num_workers=0 and turns
    # it into RuntimeError in workers; edgeload rebuilds it from its own arguments.
    assert (TwoArgError if mode["num_workers"] == 0 else RuntimeError) in theirs[-1].types
    assert TwoArgError in ours[-1].types and WorkerError in ours[-1].types


def failing_init(worker_id):
    raise NotImplementedError(f"worker {worker_id} cannot start")


def test_a_failing_worker_init_fn_raises_its_own_type():
    for cls, kw in (
        (torch.utils.data.DataLoader, {}),
        (DataLoader, {"worker_kind": "thread"}),
        (DataLoader, {"worker_kind": "process"}),
    ):
        with pytest.raises(NotImplementedError, match="cannot start"):
            list(cls(RaisesMany(), num_workers=2, worker_init_fn=failing_init, **kw))
        # The traceback holds the iterator in a cycle: collect it here, so its workers
        # stop now. Left to the next automatic collection, torch's iterator is finalised
        # in whatever thread allocates then - an edgeload worker thread of the next loader,
        # which torch 1.12's __del__ then blocks for seconds joining its own workers.
        gc.collect()


_KILLED = """
import os, signal, sys
import torch
import edgeload
from torch.utils.data import Dataset


class KillsItself(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        return i


cls = edgeload.DataLoader if sys.argv[1] == "edgeload" else torch.utils.data.DataLoader
kw = {"worker_kind": "process"} if sys.argv[1] == "edgeload" else {}
try:
    list(cls(KillsItself(), batch_size=None, num_workers=1, **kw))
except RuntimeError as exc:
    print("RuntimeError:", exc)
"""


def test_a_dead_worker_is_a_runtime_error_naming_its_pid_as_with_torch(tmp_path):
    # In a child process: torch's SIGCHLD handler would raise later in this one.
    script = tmp_path / "killed.py"
    script.write_text(_KILLED)
    for which in ("torch", "edgeload"):
        run = subprocess.run(
            [sys.executable, str(script), which], capture_output=True, text=True, timeout=120
        )
        assert re.match(r"RuntimeError: DataLoader worker \(pid(\(s\))? \d+\)", run.stdout), (
            run.stdout + run.stderr
        )


def _exited(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):  # gone before the open, or reaped after it
        return True


def test_a_worker_killed_between_tasks_is_the_same_runtime_error():
    # Killed while idle, the death shows when the next task is sent, not in a result:
    # that path must say what torch says too (it raised edgeload's own WorkerError).
    it = iter(DataLoader(Plain(100), batch_size=None, num_workers=1, worker_kind="process",
                         prefetch_factor=1))  # fmt: skip
    assert next(it) == 0
    pid = it._workers[0].pid
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while not _exited(pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _exited(pid)
    with pytest.raises(
        RuntimeError, match=rf"DataLoader worker \(pid {pid}\) is killed by signal: Killed"
    ):
        for _ in range(100):
            next(it)
    del it
    gc.collect()


class Slow(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        time.sleep(3 if i == 1 else 0)
        return i


@pytest.mark.parametrize("kind", ["thread", "process"])
def test_a_timeout_is_a_runtime_error_as_with_torch(kind):
    for cls, kw in ((torch.utils.data.DataLoader, {}), (DataLoader, {"worker_kind": kind})):
        with pytest.raises(RuntimeError, match=r"DataLoader timed out after 0\.5 seconds"):
            list(cls(Slow(), num_workers=1, timeout=0.5, **kw))
    gc.collect()


def test_the_loader_is_generic_like_torchs():
    # What an annotation evaluated at run time does (no `from __future__ import annotations`).
    alias = DataLoader[int]
    assert alias.__origin__ is DataLoader and torch.utils.data.DataLoader[int] is not None
    assert sum(int(x) for x in alias(list(range(4)))) == 6


@pytest.mark.parametrize("cls", [torch.utils.data.DataLoader, DataLoader])
def test_more_workers_than_cpus_warns_as_torch(cls):
    with pytest.warns(UserWarning, match="excessive worker creation might get DataLoader"):
        cls(list(range(4)), num_workers=len(os.sched_getaffinity(0)) + 1)


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
@pytest.mark.parametrize("mode", MODES[:2])
def test_nested_tensors_reach_default_collate_as_with_torch(mode):
    if not hasattr(torch, "nested"):
        pytest.skip(f"torch {torch.__version__} has no nested tensors (torch 1.13+)")

    class Nested(Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return torch.nested.nested_tensor([torch.ones(i + 1), torch.ones(2)])

    for cls, kw in ((torch.utils.data.DataLoader, {}), (DataLoader, mode)):
        with pytest.raises(RuntimeError, match="Batches of nested tensors are not currently"):
            list(cls(Nested(), batch_size=2, **kw))


class Plain(Dataset):
    def __init__(self, n=6):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return i


def test_the_chosen_start_method_and_why_are_in_stats():
    with DataLoader(Plain(), batch_size=2, num_workers=2, worker_kind="process") as loader:
        assert [int(x) for b in loader for x in b] == list(range(6))
        stats: dict[str, Any] = loader.stats()
    assert stats["start_method"] in ("fork", "forkserver", "spawn")
    assert stats["start_method_reason"]


def test_a_requested_start_method_that_cannot_work_says_what_to_pass():
    class Local(Dataset):
        def __len__(self):
            return 2

        def __getitem__(self, i):
            return i

    loader = DataLoader(Local(), num_workers=1, multiprocessing_context="spawn")
    with pytest.raises(ValueError, match=r"spawn process workers need .* start with 'fork'"):
        next(iter(loader))
    loader.close()


_UNGUARDED = """
import torch
import edgeload
from torch.utils.data import Dataset


class Squares(Dataset):
    def __len__(self):
        return 6

    def __getitem__(self, i):
        return i * i


for cls, kw in ((torch.utils.data.DataLoader, {}), (edgeload.DataLoader, {"worker_kind": "process"})):
    loader = cls(Squares(), batch_size=3, num_workers=2, **kw)
    print(cls.__module__.split(".")[0], [int(v) for b in loader for v in b])
"""


def test_a_script_without_a_main_guard_works_as_with_torch(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(_UNGUARDED))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines == ["torch [0, 1, 4, 9, 16, 25]", "edgeload [0, 1, 4, 9, 16, 25]"]
    assert "edgeload" in edgeload.__name__
