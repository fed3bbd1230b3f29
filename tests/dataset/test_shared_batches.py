"""Thread workers that share batches (claiming samples, oldest batch first).

What a user sees: the batches torch gives, in order, with torch's random draws and
errors, while a plain loop touches two slots; sharing stops where it cannot be exact.
"""

from __future__ import annotations

import json
import random
import threading
import time

import numpy as np
import pytest
import torch
from _datasets import assert_same_batches, run_both
from torch.utils.data import Dataset

import edgeload
from edgeload import DataLoader

THREADS = {"num_workers": 2, "worker_kind": "thread"}
FORK = {"num_workers": 2, "multiprocessing_context": "fork"}


class Pictures(Dataset):
    """Fixed-size images and labels; ``bad`` raise, ``odd`` return a float label (not
    the layout the first batch showed), ``draw_from`` on draw from the worker's generators."""

    def __init__(self, n=120, *, bad=(), odd=(), draw_from=None, draw="torch", delay_s=0.0):
        self.n, self.bad, self.odd, self.draw_from, self.delay_s = n, bad, odd, draw_from, delay_s
        self.draw = draw

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.delay_s:
            time.sleep(self.delay_s)
        if i in self.bad:
            raise OSError(f"corrupt record {i}")
        image = np.full((6, 5, 3), i % 251, np.uint8)
        image[0, 0, 0] = i // 251
        label = float(i) + 0.5 if i in self.odd else i
        if self.draw_from is not None and i >= self.draw_from:
            info = edgeload.get_worker_info()
            rng = getattr(info, "rng", None)
            if self.draw == "numpy":  # a Gaussian: one of two drawn is cached
                npr = rng.numpy_generator if rng is not None else np.random
                image[1, 1, 1] = int(abs(npr.randn()) * 50) % 250
            elif self.draw == "python":
                image[1, 1, 1] = (rng.random_generator if rng else random).randrange(250)
            else:
                gen = rng.torch_generator if rng is not None else None
                image[1, 1, 1] = int(torch.randint(0, 250, (1,), generator=gen))
        return image, label


def _plain(ds, **kw):
    return list(torch.utils.data.DataLoader(ds, **kw))


def test_a_plain_loop_gets_torchs_batches_and_touches_two_slots():
    ds = Pictures()
    reference = _plain(ds, batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(3))
    with DataLoader(
        ds, batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(3), **THREADS
    ) as loader:
        got = [[images.clone(), labels.clone()] for images, labels in loader]
        stats = loader.stats()
    assert_same_batches(got, reference)
    assert stats["batches_shared"] >= len(reference) - 4  # all but the first few
    assert stats["slots"] == 2 and stats["slots_touched"] <= 2, stats
    assert stats["slot_copies"] == 0


def test_every_epoch_shares_again_with_persistent_workers():
    ds = Pictures(120)
    with DataLoader(ds, batch_size=8, persistent_workers=True, **THREADS) as loader:
        shared = [0]
        for _ in range(2):
            got = [[x.clone(), y.clone()] for x, y in loader]
            assert_same_batches(got, _plain(ds, batch_size=8))
            shared.append(loader.stats()["batches_shared"])
        assert shared[0] < shared[1] < shared[2]


def test_a_user_who_keeps_every_batch_gets_them_all_intact():
    ds = Pictures(100)
    with DataLoader(ds, batch_size=8, **THREADS) as loader:
        kept = list(loader)  # holds every slot: later batches get fresh memory
        assert loader.stats()["batches_shared"] > 0
    assert_same_batches(kept, _plain(ds, batch_size=8))


def test_skipped_samples_leave_no_gap_and_are_counted_in_order():
    bad = (41, 42, 60, 95)
    ds = Pictures(bad=bad)
    with DataLoader(ds, batch_size=8, on_error="skip", max_skips=10, **THREADS) as loader:
        labels = [int(v) for _, lab in loader for v in lab]
        stats = loader.stats()
    assert labels == [i for i in range(120) if i not in bad]
    assert [index for index, _ in stats["skipped"]] == list(bad)
    assert stats["batches_shared"] > 0


def test_a_sample_that_raises_names_its_index_and_the_loader_closes_clean():
    ds = Pictures(bad=(77,))
    loader = DataLoader(ds, batch_size=8, **THREADS)
    seen = []
    with pytest.raises(OSError, match=r"loading sample 77\b.*corrupt record 77"):
        for _, lab in loader:
            seen.extend(int(v) for v in lab)
    assert seen == list(range(72))  # every batch before the failing one, in order
    assert loader.stats()["batches_shared"] > 0
    loader.close()


def test_a_sample_off_the_layout_goes_to_default_collate_like_torch():
    ds = Pictures(odd=(50,))
    with DataLoader(ds, batch_size=8, **THREADS) as loader:
        got = [[x.clone(), y.clone()] for x, y in loader]
        assert loader.stats()["batches_shared"] > 0
    reference = _plain(ds, batch_size=8)
    assert_same_batches(got, reference)
    assert reference[6][1].is_floating_point()  # the batch torch collated as floats


@pytest.mark.parametrize("draw", ["torch", "numpy", "python"])
def test_a_dataset_that_starts_drawing_late_still_gets_torchs_numbers(draw):
    # Draws begin at sample 60, after sharing has begun: the batches not yet yielded
    # are read again whole by their owners, from the generators as torch has them.
    ours, theirs = run_both(
        lambda: Pictures(draw_from=60, draw=draw),
        THREADS,
        FORK,
        batch_size=8,
        shuffle=False,
        seeded=True,
    )
    assert_same_batches(ours, theirs)
    with DataLoader(Pictures(draw_from=60), batch_size=8, **THREADS) as loader:
        list(loader)
        # Shared before the draws began, not after: the next epoch does not share.
        shared = loader.stats()["batches_shared"]
        assert 0 < shared <= 60 // 8
        list(loader)
        assert loader.stats()["batches_shared"] == shared


def test_resuming_a_shared_epoch_gives_the_tail():
    def make():
        return DataLoader(
            Pictures(96),
            batch_size=8,
            shuffle=True,
            generator=torch.Generator().manual_seed(5),
            **THREADS,
        )

    with make() as loader:
        full = [[x.clone(), y.clone()] for x, y in loader]
    with make() as first:
        it = iter(first)
        for _ in range(7):
            next(it)
        assert first.stats()["batches_shared"] > 0
        state = json.loads(json.dumps(first.state_dict()))
    with make() as second:
        second.load_state_dict(state)
        tail = [[x.clone(), y.clone()] for x, y in second]
    assert_same_batches(tail, full[7:])


def test_closing_while_rows_are_claimed_leaves_nothing_behind():
    ds = Pictures(400, delay_s=0.002)
    loader = DataLoader(ds, batch_size=8, **THREADS)
    it = iter(loader)
    for _ in range(8):
        next(it)
    assert loader.stats()["batches_shared"] > 0
    loader.close()  # workers mid-row: stopped, their slots given back
    assert not [t for t in threading.enumerate() if t.name.startswith("edgeload-loader")]
    with pytest.raises(edgeload.ClosedError):
        next(iter(loader))
