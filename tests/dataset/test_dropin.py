"""Drop-in behaviour that changes the data a user trains on, side by side with torch.

Each test runs the same case through ``torch.utils.data.DataLoader`` and
``edgeload.DataLoader`` and compares what a user sees: the items, the seeds, the
exception and the key words of its message.
"""

from __future__ import annotations

import gc
import inspect
import multiprocessing
import random
import threading
import time

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset, IterableDataset

from edgeload import DataLoader

# torch's own loader forks its workers whatever threads the test process has (a BLAS or
# OpenMP pool an earlier test started), and Python 3.12+ warns at such a fork (seen on
# Debian 13's Python 3.13): torch's warning. edgeload forks with threads alive only where
# torch would (a dataset only fork can load); its choice is tested in test_workers.py.
pytestmark = pytest.mark.filterwarnings(
    "ignore:This process .* is multi-threaded, use of fork:DeprecationWarning"
)

LOADERS = [
    pytest.param(torch.utils.data.DataLoader, id="torch"),
    pytest.param(DataLoader, id="edgeload"),
]


class Unsharded(IterableDataset):
    """An IterableDataset that ignores get_worker_info(): each worker yields it all."""

    def __init__(self, n=20, length=None):
        self.n, self.length = n, length

    def __iter__(self):
        return iter(range(self.n))

    def __len__(self):
        return self.n if self.length is None else self.length


class Squares(Dataset):
    def __len__(self):
        return 12

    def __getitem__(self, i):
        return i * i


def _flat(loader):
    return [int(v) for batch in loader for v in torch.as_tensor(batch).reshape(-1)]


@pytest.mark.parametrize("make", [Unsharded, Squares], ids=["iterable", "map-style"])
def test_the_default_never_changes_the_data(make):
    theirs = _flat(torch.utils.data.DataLoader(make(), batch_size=4))
    with DataLoader(make(), batch_size=4) as loader:
        ours = _flat(loader)
        assert loader.stats()["num_workers"] == 0
    assert ours == theirs
    assert len(ours) == len(make())


@pytest.mark.parametrize("num_workers", [0, 2])
def test_an_iterable_dataset_longer_than_its_len_warns_as_torch(num_workers):
    messages = []
    for cls in (torch.utils.data.DataLoader, DataLoader):
        kw = {"worker_kind": "thread"} if cls is DataLoader and num_workers else {}
        loader = cls(Unsharded(n=6, length=3), batch_size=None, num_workers=num_workers, **kw)
        assert len(loader) == 3
        with pytest.warns(UserWarning, match="Length of IterableDataset") as caught:
            items = list(loader)
        assert len(items) == 6 * max(1, num_workers)
        # the first of torch's words: pytest.warns records Python's fork warning too
        messages.append(next(str(w.message) for w in caught if w.category is UserWarning))
    assert messages[0].split("<")[0] == messages[1].split("<")[0]  # same words
    assert ("configuring the IterableDataset replica" in messages[1]) == (num_workers > 0)


class Seeds(Dataset):
    """What a worker sees of its seeds: torch.initial_seed() and a draw after reseeding."""

    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.initial_seed(), torch.randint(0, 2**30, (1,), generator=_reseeded()).item()


def _reseeded():
    safe = getattr(torch.random, "thread_safe_generator", None)
    if safe is not None:
        return safe()
    # a torch without it (JetPack 5's 1.11-2.1): a generator of the worker's own seed
    return torch.Generator().manual_seed(torch.initial_seed())


def reseed_everything(worker_id):
    torch.manual_seed(1000 + worker_id)
    random.seed(worker_id)
    np.random.seed(worker_id)


def test_thread_workers_get_their_own_seeds_as_torch_process_workers_do():
    main_torch, main_py, main_np = torch.get_rng_state(), random.getstate(), np.random.get_state()
    main_seed = torch.initial_seed()
    seen = {}
    for cls, kw in ((torch.utils.data.DataLoader, {}), (DataLoader, {"worker_kind": "thread"})):
        loader = cls(
            Seeds(),
            batch_size=None,
            num_workers=2,
            generator=torch.Generator().manual_seed(5),
            worker_init_fn=reseed_everything,
            **kw,
        )
        seen[cls] = [int(seed) for seed, _ in loader]
    # worker_init_fn reseeded worker k with 1000 + k; samples alternate between workers.
    assert seen[DataLoader] == seen[torch.utils.data.DataLoader] == [1000, 1001] * 4
    # Nothing a worker seeded reached the main thread's generators.
    assert torch.initial_seed() == main_seed
    assert torch.equal(torch.get_rng_state(), main_torch)
    assert random.getstate() == main_py
    assert np.array_equal(np.random.get_state()[1], main_np[1])


class InitialSeed(Dataset):
    def __len__(self):
        return 6

    def __getitem__(self, i):
        return torch.initial_seed()


def test_thread_worker_k_has_initial_seed_base_plus_k_like_torch():
    got = {}
    for cls, kw in ((torch.utils.data.DataLoader, {}), (DataLoader, {"worker_kind": "thread"})):
        gen = torch.Generator().manual_seed(11)
        got[cls] = [int(s) for s in cls(InitialSeed(), num_workers=2, generator=gen, **kw)]
    base = int(
        torch.empty((), dtype=torch.int64).random_(generator=torch.Generator().manual_seed(11))
    )
    assert got[DataLoader] == got[torch.utils.data.DataLoader] == [base + p % 2 for p in range(6)]


@pytest.mark.parametrize("cls", LOADERS)
@pytest.mark.parametrize(
    "attr", ["batch_size", "batch_sampler", "sampler", "drop_last", "dataset", "persistent_workers"]
)
def test_assignment_after_construction_raises_as_torch(cls, attr):
    loader = cls(Squares(), batch_size=2)
    with pytest.raises(ValueError, match=f"{attr} attribute should not be set after"):
        setattr(loader, attr, getattr(loader, attr))
    loader.num_workers = 0  # the others may change between epochs, as in torch
    assert _flat(loader) == [i * i for i in range(12)]


class SetsUpItself(Dataset):
    def __init__(self):
        self.offset = 0

    def setup(self, worker_id):
        self.offset = 100 * (worker_id + 1)

    def __len__(self):
        return 6

    def __getitem__(self, i):
        return i + self.offset


def test_a_bound_method_worker_init_fn_sets_up_the_workers_copy():
    got = {}
    for cls, kw in ((torch.utils.data.DataLoader, {}), (DataLoader, {"worker_kind": "thread"})):
        ds = SetsUpItself()
        got[cls] = _flat(cls(ds, num_workers=2, worker_init_fn=ds.setup, **kw))
        assert ds.offset == 0  # the user's object is untouched in both
    assert got[DataLoader] == got[torch.utils.data.DataLoader] == [100, 201, 102, 203, 104, 205]


def _loader_threads():
    return [t for t in threading.enumerate() if t.name.startswith("edgeload-loader")]


def _loader_processes():
    return [p for p in multiprocessing.active_children() if p.name.startswith("edgeload-loader")]


@pytest.mark.parametrize("kind", ["thread", "process"])
def test_del_of_an_iterator_stops_its_workers_without_gc(kind):
    gc.disable()
    try:
        loader = DataLoader(Squares(), batch_size=1, num_workers=2, worker_kind=kind)
        it = iter(loader)
        next(it)
        assert _loader_threads() if kind == "thread" else _loader_processes()
        del it
        deadline = time.monotonic() + 10
        while (_loader_threads() or _loader_processes()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _loader_threads() and not _loader_processes()
        assert _flat(loader) == [i * i for i in range(12)]  # the loader still works
        loader.close()
    finally:
        gc.enable()


class Counted(Dataset):
    """Holds what torch's default start method passes to workers without pickling."""

    def __init__(self):
        self.hits = multiprocessing.Value("i", 0)
        self.gate = multiprocessing.Semaphore(4)

    def __len__(self):
        return 8

    def __getitem__(self, i):
        with self.gate, self.hits.get_lock():
            self.hits.value += 1
        return i


def test_process_workers_take_shared_values_and_semaphores_like_torch():
    for cls, kw in ((torch.utils.data.DataLoader, {}), (DataLoader, {"worker_kind": "process"})):
        ds = Counted()
        assert _flat(cls(ds, batch_size=2, num_workers=2, **kw)) == list(range(8))
        assert ds.hits.value == 8


def test_process_workers_take_local_classes_closures_and_lambdas_like_torch():
    scale = 3

    class Local(Dataset):
        def __len__(self):
            return 6

        def __getitem__(self, i):
            return i * scale

    seen = []

    def init(worker_id):  # a closure: it pickles under no start method but fork
        seen.append(worker_id)

    got = {}
    for cls, kw in ((torch.utils.data.DataLoader, {}), (DataLoader, {"worker_kind": "process"})):
        loader = cls(
            Local(), batch_size=2, num_workers=2, worker_init_fn=init, collate_fn=lambda b: b, **kw
        )
        got[cls] = [x for batch in loader for x in batch]
        if cls is DataLoader:
            assert loader.stats()["start_method"] == "fork"
            assert "does not pickle" in loader.stats()["start_method_reason"]
    assert got[DataLoader] == got[torch.utils.data.DataLoader] == [0, 3, 6, 9, 12, 15]


def _pipe():
    from torch.utils.data.datapipes.iter import IterableWrapper

    return IterableWrapper(range(10)).shuffle().sharding_filter()


@pytest.mark.parametrize(
    ("kw", "ours"),
    [
        pytest.param({"shuffle": False}, {}, id="shuffle-off"),
        pytest.param({"shuffle": False, "num_workers": 2}, {"worker_kind": "thread"}, id="threads"),
        pytest.param(
            {"shuffle": False, "num_workers": 2}, {"worker_kind": "process"}, id="processes"
        ),
        pytest.param({"shuffle": True}, {}, id="shuffle-on"),
        pytest.param({"shuffle": True, "num_workers": 2}, {"worker_kind": "thread"}, id="both"),
    ],
)
def test_an_iter_datapipe_is_shuffled_and_sharded_as_torch(kw, ours):
    got = []
    torch_1_11 = tuple(int(n) for n in torch.__version__.split(".")[:2]) < (1, 12)
    for cls, extra in ((torch.utils.data.DataLoader, {}), (DataLoader, ours)):
        gen = torch.Generator().manual_seed(3)
        loader = cls(_pipe(), batch_size=2, generator=gen, **kw, **extra)
        if cls is DataLoader and torch_1_11 and kw["shuffle"] and "num_workers" in kw:
            # torch 1.11 cannot shuffle alike in each worker: refused, not repeated items
            with pytest.raises(ValueError, match=r"cannot seed a \.shuffle\(\) alike in each of"):
                iter(loader)
            return
        got.append(_flat(loader))
    assert sorted(got[1]) == list(range(10))  # each item once, whatever the workers
    if torch_1_11 and (kw["shuffle"] or "num_workers" in kw):
        # torch 1.11's own loader shards no pipe (each worker yields every item) and
        # shuffles from Python's global random: there is no torch order to match, and
        # edgeload shards as torch 1.12 and later do (docs/torch-differences.md)
        assert len(got[0]) == 10 * kw.get("num_workers", 1)
        return
    assert got[0] == got[1]
    if "num_workers" not in kw:
        assert (got[1] == list(range(10))) == (kw["shuffle"] is False)


@pytest.mark.parametrize(
    ("kw", "error", "match"),
    [
        ({"num_workers": 0, "multiprocessing_context": "fork"}, ValueError, "can only be used"),
        ({"num_workers": 2, "multiprocessing_context": "bad"}, ValueError, "valid start method"),
        ({"num_workers": 2, "multiprocessing_context": 3}, TypeError, "valid context object"),
    ],
)
@pytest.mark.parametrize("cls", LOADERS)
def test_a_bad_multiprocessing_context_is_refused_at_construction(cls, kw, error, match):
    with pytest.raises(error, match=match):
        cls(Squares(), **kw)


_FD_SCRIPT = """
import os, resource, sys, torch
import edgeload
from torch.utils.data import Dataset

class Many(Dataset):
    def __len__(self):
        return 400

    def __getitem__(self, i):
        return [torch.zeros(1) for _ in range(50)]  # each tensor travels as a descriptor

loader = edgeload.DataLoader(
    Many(), batch_size=4, num_workers=2, worker_kind="process", collate_fn=lambda b: b, timeout=60
)
it = iter(loader)
held = [next(it)]
open_now = len(os.listdir("/proc/self/fd"))
resource.setrlimit(resource.RLIMIT_NOFILE, (open_now + 30, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
try:
    held.extend(it)
except RuntimeError as exc:
    print("RuntimeError:", exc)
"""


def test_running_out_of_file_descriptors_gives_torchs_hint(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "fds.py"
    script.write_text(_FD_SCRIPT)
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    ).stdout
    assert out.startswith("RuntimeError: Too many open files."), out
    assert "ulimit -n" in out and "set_sharing_strategy('file_system')" in out


@pytest.mark.filterwarnings("ignore:pin_memory_device is deprecated")
@pytest.mark.filterwarnings("ignore:pin memory device is set")  # torch 1.12's own words
@pytest.mark.parametrize("cls", LOADERS)
def test_the_deprecated_pin_memory_device_is_accepted_as_torch(cls):
    if "pin_memory_device" not in inspect.signature(cls.__init__).parameters:
        pytest.skip(f"torch {torch.__version__}'s DataLoader has no pin_memory_device (1.12+)")
    assert _flat(cls(Squares(), batch_size=4, pin_memory_device="cuda")) == [
        i * i for i in range(12)
    ]
