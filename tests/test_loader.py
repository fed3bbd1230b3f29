"""edgeload.DataLoader side by side with torch.utils.data.DataLoader: same batches, same order.

The datasets here live at module level so process workers can unpickle them; the
other ``test_loader_*`` files import them.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from torch.utils.data import BatchSampler, Dataset, IterableDataset, RandomSampler

import edgeload
from edgeload import DataLoader

N = 23


class DictDS(Dataset):
    """Dict samples: an array, an int label, a nested tuple of a tensor and a float."""

    def __len__(self):
        return N

    def __getitem__(self, i):
        return {
            "x": np.full((3, 4), i, np.float32),
            "y": i,
            "t": (torch.tensor([i, 2 * i], dtype=torch.int16), float(i) / 2),
        }


class TupleDS(Dataset):
    def __len__(self):
        return N

    def __getitem__(self, i):
        return torch.arange(6, dtype=torch.float32).reshape(2, 3) + i, [i, True]


class VarDS(Dataset):
    """Samples of different lengths: only a custom collate can batch them."""

    def __len__(self):
        return N

    def __getitem__(self, i):
        return list(range(i % 5))


class MixedDS(Dataset):
    """Mostly numpy samples, but every 7th is a tensor: the slot layout must give way."""

    def __len__(self):
        return N

    def __getitem__(self, i):
        x = np.arange(4, dtype=np.float32) * i
        return (torch.from_numpy(x) if i % 7 == 3 else x), {"i": i}


class StrDS(Dataset):
    def __len__(self):
        return N

    def __getitem__(self, i):
        return {"name": f"item-{i}", "v": np.int64(i)}


class AugDS(Dataset):
    """A random augmentation from the worker's generators (the globals in processes)."""

    def __len__(self):
        return N

    def __getitem__(self, i):
        info = edgeload.get_worker_info()
        rng = getattr(info, "rng", None)
        if rng is not None:
            py, npr, tg = rng.random_generator, rng.numpy_generator, rng.torch_generator
        else:
            py, npr, tg = random, np.random, None
        noise = torch.rand(2, generator=tg)
        return torch.tensor([float(i), py.random(), npr.rand()]), noise


class ShardedIterDS(IterableDataset):
    """Yields range(n), split between workers by get_worker_info() as torch documents."""

    def __init__(self, n=N):
        self.n = n

    def __len__(self):
        return self.n

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        if info is None:
            return iter(range(self.n))
        # Uneven shards: worker 0 gets the first two thirds, so one stream ends early.
        cut = (2 * self.n) // 3 if info.num_workers == 2 else None
        if cut is None:
            return iter(range(info.id, self.n, info.num_workers))
        return iter(range(cut) if info.id == 0 else range(cut, self.n))


class RangeDS(IterableDataset):
    """torch's documented IterableDataset example: worker_init_fn splits [start, end)."""

    def __init__(self, start, end):
        self.start, self.end = start, end

    def __iter__(self):
        return iter(range(self.start, self.end))


def split_range(worker_id):
    # Assigns to the worker's own copy of the dataset, as torch's docs show.
    info = torch.utils.data.get_worker_info()
    ds = info.dataset
    per_worker = -(-(ds.end - ds.start) // info.num_workers)
    ds.start = ds.start + worker_id * per_worker
    ds.end = min(ds.start + per_worker, ds.end)


def pair_collate(samples):
    return {"n": len(samples), "items": [s for s in samples]}


def same(a, b):
    """Equal values, types, dtypes and structure."""
    if isinstance(a, torch.Tensor):
        return (
            isinstance(b, torch.Tensor)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and torch.equal(a, b)
        )
    if isinstance(a, dict):
        return type(a) is type(b) and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return (
            type(a) is type(b)
            and len(a) == len(b)
            and all(same(x, y) for x, y in zip(a, b, strict=True))
        )
    return type(a) is type(b) and a == b


def assert_same_batches(ours, theirs):
    assert len(ours) == len(theirs)
    for k, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert same(a, b), f"batch {k} differs:\n edgeload {a}\n torch    {b}"


def run_both(make_ds, ours_kw, torch_kw=None, *, seed=7, epochs=1, **common):
    """Batches of ``epochs`` epochs from both loaders, each with a fresh seeded generator."""
    out = []
    for cls, extra in ((DataLoader, ours_kw), (torch.utils.data.DataLoader, torch_kw or {})):
        torch.manual_seed(seed)
        kwargs = dict(common)
        if kwargs.pop("seeded", False):
            kwargs["generator"] = torch.Generator().manual_seed(seed)
        loader = cls(make_ds(), **kwargs, **extra)
        out.append([b for _ in range(epochs) for b in loader])
        if cls is DataLoader:
            loader.close()
    return out


MODES = [
    pytest.param({"num_workers": 0}, id="main"),
    pytest.param({"num_workers": 2, "worker_kind": "thread"}, id="threads"),
]

CASES = [
    pytest.param(DictDS, {"batch_size": 4, "shuffle": True, "seeded": True}, id="dict-shuffle"),
    pytest.param(TupleDS, {"batch_size": 5, "drop_last": True}, id="tuple-drop-last"),
    pytest.param(TupleDS, {"batch_size": 4, "shuffle": True}, id="global-rng-shuffle"),
    pytest.param(StrDS, {"batch_size": 3}, id="strings"),
    pytest.param(MixedDS, {"batch_size": 4}, id="mixed-kinds"),
    pytest.param(VarDS, {"batch_size": 4, "collate_fn": pair_collate}, id="custom-collate"),
    pytest.param(DictDS, {"batch_size": None}, id="no-batching"),
    pytest.param(TupleDS, {"batch_size": 1, "shuffle": True, "seeded": True}, id="batch-1"),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("make_ds", "kw"), CASES)
def test_same_batches_as_torch(make_ds, kw, mode):
    ours, theirs = run_both(make_ds, mode, epochs=2, **kw)
    assert_same_batches(ours, theirs)


@pytest.mark.parametrize("mode", MODES)
def test_batch_sampler_gives_torch_batches(mode):
    def make_sampler():
        gen = torch.Generator().manual_seed(3)
        return BatchSampler(RandomSampler(range(N), generator=gen), 6, drop_last=False)

    ours = list(DataLoader(DictDS(), batch_sampler=make_sampler(), **mode))
    theirs = list(torch.utils.data.DataLoader(DictDS(), batch_sampler=make_sampler()))
    assert_same_batches(ours, theirs)
    fixed = [[0, 5], [3], [22, 1, 2]]
    assert_same_batches(
        list(DataLoader(TupleDS(), batch_sampler=fixed, **mode)),
        list(torch.utils.data.DataLoader(TupleDS(), batch_sampler=fixed)),
    )


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("batch_size", [None, 4])
def test_sharded_iterable_dataset_matches_torch_workers(mode, batch_size):
    # torch's reference runs 2 forked worker processes: sharding through
    # torch.utils.data.get_worker_info() must give the same batches in thread workers.
    torch_kw = {"num_workers": 2, "multiprocessing_context": "fork"}
    if mode["num_workers"] == 0:
        torch_kw = {}
    ours, theirs = run_both(ShardedIterDS, mode, torch_kw, batch_size=batch_size)
    assert_same_batches(ours, theirs)


@pytest.mark.parametrize("mode", [MODES[1], pytest.param(None, id="processes")])
def test_worker_init_fn_configuring_its_dataset_copy_matches_torch(mode):
    fork = {"num_workers": 2, "multiprocessing_context": "fork"}
    ours_kw = {**fork, "worker_kind": "process"} if mode is None else mode
    kw = {"batch_size": 2, "worker_init_fn": split_range}
    ours, theirs = run_both(lambda: RangeDS(3, 14), ours_kw, fork, **kw)
    assert_same_batches(ours, theirs)


def test_process_workers_match_torch_processes_with_random_augmentation():
    # Same worker seeds and the same batch-to-worker assignment as torch: random
    # augmentations drawn from the global generators come out identical.
    kw = {"num_workers": 2, "multiprocessing_context": "fork"}
    ours, theirs = run_both(
        AugDS, {**kw, "worker_kind": "process"}, kw, batch_size=4, shuffle=True, seeded=True
    )
    assert_same_batches(ours, theirs)
    # Thread workers draw the same numbers from their own generators.
    threads, _ = run_both(
        AugDS,
        {"num_workers": 2, "worker_kind": "thread"},
        kw,
        batch_size=4,
        shuffle=True,
        seeded=True,
    )
    assert_same_batches(threads, theirs)


def test_thread_workers_do_not_touch_global_random_state():
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    expected = (random.random(), np.random.rand(), torch.rand(1))
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    with DataLoader(AugDS(), batch_size=4, num_workers=2, worker_kind="thread") as loader:
        list(loader)
    # The loader drew its base seed and shuffle seed from torch's RNG as torch does;
    # python's and numpy's global generators were left alone.
    assert random.random() == expected[0]
    assert np.random.rand() == expected[1]


def test_len_matches_torch():
    for kw in ({"batch_size": 4}, {"batch_size": 4, "drop_last": True}, {"batch_size": None}):
        assert len(DataLoader(DictDS(), **kw)) == len(torch.utils.data.DataLoader(DictDS(), **kw))
        assert len(DataLoader(ShardedIterDS(), **kw)) == len(
            torch.utils.data.DataLoader(ShardedIterDS(), **kw)
        )


class ImageDS(Dataset):
    """Fixed-size uint8 images whose pixels all equal the index (mod 256), and a label."""

    def __init__(self, n=200):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return np.full((3, 8, 8), i % 256, np.uint8), i


@pytest.mark.parametrize("kind", ["thread", "process"])
def test_fixed_size_batches_use_few_reused_slots_and_kept_batches_stay_intact(kind):
    ctx = "fork" if kind == "process" else None
    with DataLoader(
        ImageDS(), batch_size=4, num_workers=2, worker_kind=kind, multiprocessing_context=ctx
    ) as loader:
        kept = []
        seen = []
        for k, (images, labels) in enumerate(loader):
            assert images.dtype == torch.uint8 and images.shape[1:] == (3, 8, 8)
            assert labels.dtype == torch.int64
            # Every pixel of a sample equals its label: nothing was overwritten.
            assert torch.equal(images[:, 0, 0, 0], (labels % 256).to(torch.uint8))
            seen.extend(labels.tolist())
            if k % 10 == 0:
                kept.append((images, labels))
        assert sorted(seen) == list(range(200))
        for images, labels in kept:
            assert torch.equal(images.flatten(1).max(1).values, (labels % 256).to(torch.uint8))
        stats = loader.stats()
        assert stats["slot_bytes"] >= 4 * 3 * 8 * 8
        assert stats["slots"] <= 12 < len(loader)


def test_a_start_method_means_process_workers_and_auto_means_the_plan():
    with DataLoader(DictDS(), batch_size=8, num_workers=1, multiprocessing_context="fork") as ld:
        assert sum(len(b["y"]) for b in ld) == N
        assert ld.stats()["worker_kind"] == "process"
    with DataLoader(DictDS(), batch_size=8) as ld:
        list(ld)
        plan = edgeload.plan_for(batch=8)
        assert ld.stats()["num_workers"] == plan.num_workers
        assert ld.stats()["worker_kind"] == plan.worker_kind


def test_prefetch_bytes_bounds_the_slots_and_batches_in_flight():
    batch_bytes = 4 * 3 * 8 * 8 + 64 + 4 * 8  # images, alignment, labels
    loader = DataLoader(
        ImageDS(60), batch_size=4, num_workers=2, worker_kind="thread", prefetch_bytes=batch_bytes
    )
    with loader:
        labels = [int(v) for _, lab in loader for v in lab]
        assert labels == list(range(60))
        assert loader.stats()["slots"] == 2


def test_stats_say_which_memory_the_slots_use_and_why():
    data = [np.full((4, 4), i, np.uint8) for i in range(8)]
    with DataLoader(data, batch_size=4, num_workers=1, worker_kind="thread") as loader:
        assert len(list(loader)) == 2
        stats = loader.stats()
    if not torch.cuda.is_available():
        assert stats["memory_mode"] == "host"
        assert "no CUDA GPU" in stats["memory_mode_reason"]
    assert stats["memory_mode_reason"]
