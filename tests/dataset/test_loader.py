"""edgeload.DataLoader side by side with torch.utils.data.DataLoader: same batches, same order.

The datasets and helpers live in ``tests/_datasets.py``.
"""

from __future__ import annotations

import linecache
import logging
import random
import sys
import threading
import time

import numpy as np
import pytest
import torch
from _datasets import (
    AugDS,
    DictDS,
    MixedDS,
    N,
    RangeDS,
    ShardedIterDS,
    StrDS,
    TupleDS,
    VarDS,
    assert_same_batches,
    pair_collate,
    run_both,
    split_range,
)
from torch.utils.data import BatchSampler, Dataset, RandomSampler

import edgeload
from edgeload import DataLoader
from edgeload.platform.plan import slot_count

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
    with DataLoader(DictDS(), batch_size=8, num_workers="auto") as ld:
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


class RecordingImageDS(ImageDS):
    """ImageDS that records which indices its (thread) workers have read."""

    def __init__(self, n=200):
        super().__init__(n)
        self.read = []  # list.append is atomic under the GIL

    def __getitem__(self, i):
        self.read.append(i)
        return super().__getitem__(i)


def _worker_waits(frame) -> bool:
    """Whether a worker thread whose top frame is ``frame`` waits: for a task in its
    inbox (the pool's loop, blocked in ``inbox.get``) or on a lock or event (the test's
    gate, a slot)."""
    if frame is None:
        return False
    code = frame.f_code
    if code.co_name == "wait":
        return True
    line = linecache.getline(code.co_filename, frame.f_lineno)
    return code.co_name == "_run" and "inbox.get(" in line


def _reads_settle(ds, timeout_s=30.0):
    """How many samples were read once every loader worker thread waits (twice in a row,
    with the same count), polled until ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        workers = [t.ident for t in threading.enumerate() if t.name.startswith("edgeload-loader-")]
        frames = sys._current_frames()
        count = len(ds.read)
        if workers and all(_worker_waits(frames.get(ident)) for ident in workers):
            if last == count:
                return count
            last = count
        else:
            last = None
        time.sleep(0.005)
    raise AssertionError(f"the loader's workers were still busy after {timeout_s} s")


@pytest.mark.parametrize(
    ("prefetch_factor", "in_flight"),
    [(None, 4), (1, 2), (2, 4), (3, 6)],
    ids=["default", "pf1", "pf2", "pf3"],
)
def test_thread_workers_keep_prefetch_factor_tasks_each_in_flight(prefetch_factor, in_flight):
    ds = RecordingImageDS()
    loader = DataLoader(
        ds, batch_size=4, num_workers=2, worker_kind="thread", prefetch_factor=prefetch_factor
    )
    with loader:
        it = iter(loader)
        first = next(it)
        # Holding one batch and asking for no other, the workers read it and in_flight
        # more: as torch, the place a delivered batch frees is refilled on delivery.
        assert _reads_settle(ds) == 4 * (in_flight + 1)
        assert first[1].tolist() == [0, 1, 2, 3]
        labels = [first[1]] + [lab for _, lab in it]
        assert torch.cat(labels).tolist() == list(range(200))
        # One slot per task in flight, the batch the user holds and one being handed over.
        assert loader.stats()["slots"] == in_flight + 2


@pytest.mark.parametrize(
    "kw",
    [{}, {"num_workers": 2, "worker_kind": "thread"}, {"num_workers": 1, "worker_kind": "thread"}],
    ids=["defaults", "threads", "one-thread"],
)
def test_a_plain_loop_makes_no_copies_and_logs_nothing(kw, caplog):
    # `for x, y in loader` keeps the previous batch bound while the next is loaded;
    # the loop drops it at the rebinding.  That is no "consumer that keeps batches".
    caplog.set_level(logging.INFO, logger="edgeload")
    with DataLoader(ImageDS(100), batch_size=10, **kw) as loader:
        for _ in range(2):
            for images, labels in loader:
                assert torch.equal(images[:, 0, 0, 0], labels.to(torch.uint8))
        stats = loader.stats()
    assert stats["batches"] == 20 and stats["slots"] >= 2
    assert stats["slot_copies"] == 0
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_user_who_keeps_every_batch_gets_fresh_memory_not_copies():
    # Tasks never wait for a slot: one that finds none free writes fresh memory, so a
    # slot is never held back from the consumer and no batch is copied.
    with DataLoader(ImageDS(60), batch_size=4) as loader:
        kept = list(loader)
        stats = loader.stats()
    assert stats["slot_copies"] == 0 and stats["slots_held_by_user"] == stats["slots"]
    for images, labels in kept:
        assert torch.equal(images[:, 0, 0, 0], labels.to(torch.uint8))


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"num_workers": 2, "worker_kind": "thread"},
        {"num_workers": 2, "worker_kind": "process", "multiprocessing_context": "fork"},
    ],
    ids=["main", "threads", "processes"],
)
def test_two_threads_calling_next_share_the_batches_as_with_torch(kw):
    # Each batch goes to one caller, every sample once, and both callers end with
    # StopIteration: no ClosedError that nobody caused.  The race is at the end of an
    # epoch, so several epochs are run.
    with DataLoader(ImageDS(120), batch_size=4, **kw) as loader:
        for _ in range(5):
            _two_threads_take_one_epoch(loader)


def _two_threads_take_one_epoch(loader):
    it = iter(loader)
    got: list[list[int]] = [[], []]
    ended = [threading.Event(), threading.Event()]
    errors: list[BaseException] = []
    start = threading.Barrier(2, timeout=30)

    def consume(k):
        try:
            start.wait()
            while True:
                try:
                    images, labels = next(it)
                except StopIteration:
                    ended[k].set()
                    return
                assert torch.equal(images[:, 0, 0, 0], (labels % 256).to(torch.uint8))
                got[k].extend(labels.tolist())
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=consume, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        # Forking the next epoch's workers as these threads end can leave a child stuck
        # on a lock one of them held (glibc 2.31, under emulation most of all); the
        # loader forks it again after 30 s, so a hang is what outlasts that.
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a caller of next() hung"
    assert errors == []
    assert all(e.is_set() for e in ended)
    assert sorted(got[0] + got[1]) == list(range(120))
    with pytest.raises(StopIteration):
        next(it)


def test_no_workers_read_only_the_batch_asked_for():
    # As torch's num_workers=0: the calling thread loads each batch when it is asked
    # for, never the next one ahead (no refill on delivery without workers).
    ds = RecordingImageDS(40)
    with DataLoader(ds, batch_size=4, num_workers=0) as loader:
        it = iter(loader)
        assert next(it)[1].tolist() == [0, 1, 2, 3]
        assert ds.read == [0, 1, 2, 3]
        assert next(it)[1].tolist() == [4, 5, 6, 7]
        assert ds.read == list(range(8))


class _GatedImageDS(RecordingImageDS):
    """RecordingImageDS whose samples of batch ``gated`` (of 4) wait for ``gate``."""

    def __init__(self, n, gated):
        super().__init__(n)
        self.gated = gated
        self.gate = threading.Event()

    def __getitem__(self, i):
        if i // 4 == self.gated and not self.gate.wait(30):
            raise TimeoutError("the test never opened the gate")
        return super().__getitem__(i)


def test_a_thread_workers_queued_task_holds_no_slot_until_the_worker_starts_it():
    ds = _GatedImageDS(200, gated=12)
    loader = DataLoader(ds, batch_size=4, num_workers=2, worker_kind="thread")
    with loader:
        it = iter(loader)
        try:
            labels = [v for _, (_, lab) in zip(range(12), it) for v in lab.tolist()]
            # Batches 12-15 are in flight: worker 0 writes 12 (stuck at the gate), 14
            # waits in its inbox; worker 1 has written 13 and 15.  Only those three hold
            # a slot (the user kept no batch).
            _reads_settle(ds)
            stats = loader.stats()
            assert (stats["slots_in_use"], stats["slots_held_by_user"]) == (3, 0)
        finally:
            ds.gate.set()
        labels += [v for _, lab in it for v in lab.tolist()]
    assert labels == list(range(200))


class _SamplerFault(Exception):
    pass


class _BatchesThenFault:
    """A batch sampler: ``good`` batches of 4, then it raises."""

    def __init__(self, good: int) -> None:
        self.good = good

    def __iter__(self):
        for b in range(self.good):
            yield list(range(4 * b, 4 * b + 4))
        raise _SamplerFault(f"sampler broke after {self.good} batches")

    def __len__(self) -> int:
        return self.good + 1


@pytest.mark.parametrize("kind", ["thread", "process"])
def test_a_batch_made_before_the_sampler_fails_is_delivered_then_the_error(kind):
    # Four tasks in flight: the sampler fails on the refill after the third batch; that
    # batch is still delivered, and the error comes at the next call.
    loader = DataLoader(
        ImageDS(40), batch_sampler=_BatchesThenFault(6), num_workers=2, worker_kind=kind
    )
    got = []
    with loader, pytest.raises(_SamplerFault, match="after 6 batches"):
        for _, labels in loader:
            got.append(labels.tolist())
    assert got == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]


def test_process_workers_keep_two_tasks_each_in_flight_by_default():
    with DataLoader(
        ImageDS(40), batch_size=4, num_workers=2, multiprocessing_context="fork"
    ) as loader:
        assert [int(v) for _, lab in loader for v in lab] == list(range(40))
        assert loader.stats()["slots"] == 2 * 2 + 2


def test_the_slots_fit_the_prefetch_budget_as_the_plan_counts_it():
    batch_bytes = 4 * 3 * 8 * 8 + 64 + 4 * 8  # images, alignment, labels
    budget = 3 * batch_bytes
    loader = DataLoader(
        ImageDS(40), batch_size=4, num_workers=2, worker_kind="thread", prefetch_bytes=budget
    )
    with loader:
        labels = [int(v) for _, lab in loader for v in lab]
        stats = loader.stats()
    assert labels == list(range(40))
    # Four tasks may be in flight, but the budget buys three slots, as in the plan.
    assert stats["slots"] == slot_count(4, stats["slot_bytes"], budget) == 3
    assert stats["slots"] * stats["slot_bytes"] <= budget


def test_stats_say_which_memory_the_slots_use_and_why():
    data = [np.full((4, 4), i, np.uint8) for i in range(8)]
    with DataLoader(data, batch_size=4, num_workers=1, worker_kind="thread") as loader:
        assert len(list(loader)) == 2
        stats = loader.stats()
    if not torch.cuda.is_available():
        assert stats["memory_mode"] == "host"
        assert "no CUDA GPU" in stats["memory_mode_reason"]
    assert stats["memory_mode_reason"]


def test_stats_before_the_first_iter_show_what_the_plan_chose():
    loader = DataLoader(DictDS(), batch_size=4, num_workers=0)
    stats = loader.stats()
    assert stats["batches"] == 0 and stats["memory_mode"] == "host" and stats["memory_mode_reason"]
    assert list(loader)  # the plan taken for stats() is the one the epoch uses
    assert loader.stats()["memory_mode"] == stats["memory_mode"]
    loader.close()
    with DataLoader(DictDS(), batch_size=4) as fresh:  # "auto" workers: planned, not started
        assert fresh.stats()["num_workers"] >= 0
