"""States saved by an earlier edgeload still load, and give the batches they gave then.

``saved_states_v1.json`` was written by the loader as it was before its settings and
state got their own modules (main at c0f1d40): for each case the state taken after
some batches, the batches taken before it and the batches the old loader gave after it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from _datasets import AugDS, DictDS, N, ShardedIterDS

from edgeload import DataLoader

SAVED = json.loads((Path(__file__).parent / "saved_states_v1.json").read_text())
THREADS = {"num_workers": 2, "worker_kind": "thread"}
CASES = {
    "aug_threads_shuffle": (AugDS, dict(THREADS, batch_size=3, shuffle=True)),
    "dict_calling_thread": (DictDS, dict(num_workers=0, batch_size=4, shuffle=True)),
    "iterable_uneven_shards": (ShardedIterDS, dict(THREADS, batch_size=2)),
    "dict_out_of_order": (DictDS, dict(THREADS, batch_size=2, shuffle=True, in_order=False)),
    "dict_epoch_boundary": (DictDS, dict(THREADS, batch_size=5, shuffle=True)),
}


def plain(x):
    if isinstance(x, (torch.Tensor, np.ndarray)):
        return x.tolist()
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    return x


def test_every_case_is_saved():
    assert set(SAVED) == set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_old_state_resumes_where_it_was_taken(name):
    make_ds, kwargs = CASES[name]
    saved = SAVED[name]
    with DataLoader(make_ds(), generator=torch.Generator().manual_seed(5), **kwargs) as loader:
        loader.load_state_dict(saved["state"])
        if "order" in saved["state"]:  # mid-epoch: reported unchanged until iter()
            assert loader.state_dict() == saved["state"]
        tail = [plain(b) for b in loader]
    if kwargs.get("in_order", True):
        assert tail == saved["tail"]
    else:  # the order of an out-of-order run is timing; each sample still comes once
        ys = [y for b in saved["got"] + tail for y in b["y"]]
        assert sorted(ys) == list(range(N))
