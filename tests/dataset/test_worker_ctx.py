"""Thread workers on a torch older than the one here (every JetPack build): no ``worker._RNG``.

torch 1.11 - 2.6 have no ``torch.utils.data._utils.worker._RNG``; removing it here runs the
same code path as on a Jetson. The emulated arm64 root (the nox arm64 session, torch 2.1)
runs these and the rest of the loader tests without removing anything.
"""

from __future__ import annotations

import dataclasses
import json
import random

import numpy as np
import pytest
import torch
from _datasets import AugDS, ShardedIterDS, assert_same_batches, run_both
from torch.utils.data._utils import worker

import edgeload
from edgeload import DataLoader, cli

THREADS = {"num_workers": 2, "worker_kind": "thread"}
FORK = {"num_workers": 2, "multiprocessing_context": "fork"}


def _probe_fallbacks(capsys):
    """What `edgeload probe --json` lists as missing from this torch and OpenCV."""
    assert cli.main(["probe", "--json"]) == 0
    return [f["lacks"] for f in json.loads(capsys.readouterr().out)["fallbacks"]]


@pytest.fixture
def old_torch(monkeypatch):
    """torch as JetPack ships it: no per-thread generator container."""
    if hasattr(worker, "_RNG"):
        monkeypatch.delattr(worker, "_RNG")


def test_thread_workers_without_torch_rng_match_torch_processes(old_torch):
    threads, theirs = run_both(AugDS, THREADS, FORK, batch_size=4, shuffle=True, seeded=True)
    assert_same_batches(threads, theirs)


def test_thread_workers_without_torch_rng_carry_edgeloads_generators(old_torch, capsys):
    seen = []

    class Probe(AugDS):
        def __getitem__(self, i):
            info = torch.utils.data.get_worker_info()
            seen.append((info.rng, info.worker_method, info.id))
            return super().__getitem__(i)

    with DataLoader(Probe(), batch_size=4, **THREADS) as loader:
        list(loader)
    rngs = {id(rng): rng for rng, _, _ in seen}.values()
    assert len(rngs) == 2  # one set of generators per worker
    for rng in rngs:  # one generator of each kind, as torch's worker._RNG holds them
        assert isinstance(rng.random_generator, random.Random)
        assert isinstance(rng.torch_generator, torch.Generator)
        assert isinstance(rng.numpy_generator, np.random.RandomState)
    assert {method for _, method, _ in seen} == {"thread"}
    assert {wid for _, _, wid in seen} == {0, 1}
    assert any("worker._RNG" in lack for lack in _probe_fallbacks(capsys))


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
            infos.append(edgeload.get_worker_info())
            return super().__getitem__(i)

    threads, theirs = run_both(Probe, THREADS, FORK, batch_size=4, shuffle=True, seeded=True)
    assert_same_batches(threads, theirs)
    # The thread workers' info is edgeload's own, with the fields the strict one refuses.
    ours = [info for info in infos if not isinstance(info, _StrictWorkerInfo)]
    assert ours and {info.worker_method for info in ours} == {"thread"}
    assert all(info.rng.torch_generator is not None for info in ours)


def test_the_fallback_is_listed_exactly_when_torch_lacks_the_rng(capsys):
    lacks = _probe_fallbacks(capsys)
    assert any("worker._RNG" in lack for lack in lacks) == (not hasattr(worker, "_RNG"))
