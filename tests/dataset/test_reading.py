"""A worker's first batch: its layout comes from the first sample that loads, and a
sample that does not fit that layout hands the batch to torch's default_collate."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _datasets import assert_same_batches, run_both
from torch.utils.data import Dataset

from edgeload import DataLoader, WorkerError

MODES = [
    pytest.param({"num_workers": 0}, id="main"),
    pytest.param({"num_workers": 2, "worker_kind": "thread"}, id="threads"),
    pytest.param(
        {"num_workers": 2, "worker_kind": "process", "multiprocessing_context": "fork"},
        id="processes",
    ),
]


class FirstBadDS(Dataset):
    """Fixed-size samples; the ones in ``bad`` raise (the very first among them)."""

    def __init__(self, bad=(0,)):
        self.bad = set(bad)

    def __len__(self):
        return 40

    def __getitem__(self, i):
        if i in self.bad:
            raise OSError(f"corrupt record {i}")
        return np.full((2, 3), i, np.int16), {"i": i, "w": float(i) / 4}


class DtypeDS(Dataset):
    """Every fifth sample is float64 among float32 ones: stacking promotes the batch."""

    def __len__(self):
        return 23

    def __getitem__(self, i):
        return np.arange(3, dtype=np.float64 if i % 5 == 2 else np.float32) + i, i


class ShapeDS(Dataset):
    """Sample 2 is longer than the others: no batch of it can be stacked."""

    def __len__(self):
        return 12

    def __getitem__(self, i):
        return np.zeros(4 if i == 2 else 3, np.float32)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bad", [(0,), (0, 1, 2, 3, 4)], ids=["first-sample", "first-batch"])
def test_a_skipped_first_sample_leaves_the_layout_to_the_next_one(mode, bad):
    with DataLoader(FirstBadDS(bad), batch_size=5, on_error="skip", max_skips=5, **mode) as loader:
        got = [(x.tolist(), y["i"].tolist(), y["w"].tolist()) for x, y in loader]
        stats = loader.stats()
    want = [i for i in range(40) if i not in bad]
    assert [i for _, ids, _ in got for i in ids] == want
    assert [row for x, _, _ in got for row in x] == [[[i] * 3] * 2 for i in want]
    assert [w for _, _, ws in got for w in ws] == [i / 4 for i in want]
    assert stats["samples_skipped"] == len(bad)
    # The layout was learned from a loaded sample: the loader made its slots.
    assert stats["slot_bytes"] >= 5 * 2 * 3 * 2


@pytest.mark.parametrize("mode", MODES)
def test_a_first_batch_whose_dtypes_differ_is_collated_as_torch_does(mode):
    # torch's worker processes stack into shared memory of the first sample's dtype.
    in_processes = mode.get("worker_kind") == "process"
    torch_kw = {"num_workers": 2, "multiprocessing_context": "fork"} if in_processes else {}
    ours, theirs = run_both(DtypeDS, mode, torch_kw, batch_size=5)
    assert ours[0][0].dtype == (torch.float32 if in_processes else torch.float64)
    assert_same_batches(ours, theirs)


@pytest.mark.parametrize("mode", MODES)
def test_a_first_batch_whose_shapes_differ_fails_as_torch_does(mode):
    with pytest.raises(RuntimeError, match="equal size") as theirs:
        list(torch.utils.data.DataLoader(ShapeDS(), batch_size=4))
    loader = DataLoader(ShapeDS(), batch_size=4, **mode)
    with loader, pytest.raises(WorkerError, match="equal size") as ours:
        list(loader)
    assert str(theirs.value) in str(ours.value)
    assert ours.value.index == [0, 1, 2, 3]
