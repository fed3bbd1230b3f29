"""Datasets and comparison helpers shared by the dataset-loader tests.

They live at module level so process workers can unpickle them.
"""

from __future__ import annotations

import random

import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset

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
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def assert_same_batches(ours, theirs):
    assert len(ours) == len(theirs)
    for k, (a, b) in enumerate(zip(ours, theirs)):
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
