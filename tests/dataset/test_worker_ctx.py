"""Thread workers on a torch older than the one here (every JetPack build): no ``worker._RNG``.

torch 1.11 - 2.6 have no ``torch.utils.data._utils.worker._RNG``; removing it here runs the
same code path as on a Jetson. The emulated arm64 root (scripts/test-targets.sh, torch 2.1)
runs these and the rest of the loader tests without removing anything.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from _datasets import AugDS, ShardedIterDS, assert_same_batches, run_both
from torch.utils.data._utils import worker

import edgeload
from edgeload import DataLoader
from edgeload.dataset._worker import ThreadRNG, ThreadWorkerInfo, thread_worker_fallbacks

THREADS = {"num_workers": 2, "worker_kind": "thread"}
FORK = {"num_workers": 2, "multiprocessing_context": "fork"}


@pytest.fixture
def old_torch(monkeypatch):
    """torch as JetPack ships it: no per-thread generator container."""
    if hasattr(worker, "_RNG"):
        monkeypatch.delattr(worker, "_RNG")


def test_thread_workers_without_torch_rng_match_torch_processes(old_torch):
    threads, theirs = run_both(AugDS, THREADS, FORK, batch_size=4, shuffle=True, seeded=True)
    assert_same_batches(threads, theirs)


def test_thread_workers_without_torch_rng_carry_edgeloads_generators(old_torch):
    seen = []

    class Probe(AugDS):
        def __getitem__(self, i):
            info = torch.utils.data.get_worker_info()
            seen.append((type(info.rng), info.worker_method, info.id))
            return super().__getitem__(i)

    with DataLoader(Probe(), batch_size=4, **THREADS) as loader:
        list(loader)
    assert {kind for kind, _, _ in seen} == {ThreadRNG}
    assert {method for _, method, _ in seen} == {"thread"}
    assert {wid for _, _, wid in seen} == {0, 1}
    assert "worker._RNG" in thread_worker_fallbacks()[0][0]


def test_sharding_by_get_worker_info_works_without_torch_rng(old_torch):
    ours, theirs = run_both(ShardedIterDS, THREADS, FORK, batch_size=4)
    assert_same_batches(ours, theirs)


def test_resume_without_torch_rng_gives_the_tail(old_torch):
    def make():
        gen = torch.Generator().manual_seed(5)
        return DataLoader(AugDS(), generator=gen, batch_size=3, shuffle=True, **THREADS)

    with make() as loader:
        full = list(loader)
    with make() as first:
        it = iter(first)
        for _ in range(4):
            next(it)
        state = json.loads(json.dumps(first.state_dict()))
    with make() as second:
        second.load_state_dict(state)
        tail = list(second)
    assert_same_batches(tail, full[4:])


@dataclasses.dataclass(frozen=True)
class _StrictWorkerInfo:
    """A WorkerInfo that takes only torch's four original fields, as a future torch might."""

    id: int
    num_workers: int
    seed: int
    dataset: object


def test_a_workerinfo_refusing_rng_gets_edgeloads_info(old_torch, monkeypatch):
    monkeypatch.setattr(worker, "WorkerInfo", _StrictWorkerInfo)
    infos = []

    class Probe(AugDS):
        def __getitem__(self, i):
            infos.append(type(edgeload.get_worker_info()))
            return super().__getitem__(i)

    threads, theirs = run_both(Probe, THREADS, FORK, batch_size=4, shuffle=True, seeded=True)
    assert_same_batches(threads, theirs)
    assert ThreadWorkerInfo in infos


def test_the_fallback_is_listed_exactly_when_torch_lacks_the_rng():
    lacks = [lack for lack, _ in thread_worker_fallbacks()]
    assert any("worker._RNG" in lack for lack in lacks) == (not hasattr(worker, "_RNG"))
