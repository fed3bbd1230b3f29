"""Mid-epoch resume: state_dict() after batch k, loaded into a new loader, gives the tail."""

from __future__ import annotations

import json
import os

import pytest
import torch
from _datasets import AugDS, DictDS, N, ShardedIterDS, TupleDS, assert_same_batches
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgeload import DataLoader, StateError, load_state, save_state

FAST = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def make(ds, mode, seed=5, **kw):
    return DataLoader(ds, generator=torch.Generator().manual_seed(seed), **mode, **kw)


def run_with_resume(make_loader, k, *, epochs=1):
    """The uninterrupted batches, and the batches after resuming at batch k of epoch 0."""
    with make_loader() as full_loader:
        full = [b for _ in range(epochs) for b in full_loader]
    with make_loader() as first:
        it = iter(first)
        for _ in range(k):
            next(it)
        state = json.loads(json.dumps(first.state_dict()))  # plain JSON, round-tripped
    with make_loader() as second:
        second.load_state_dict(state)
        tail = list(second)
        for _ in range(epochs - 1):
            tail.extend(second)
    return full, tail


THREADS = {"num_workers": 2, "worker_kind": "thread"}
MODES = [THREADS, {"num_workers": 3, "worker_kind": "thread"}]


@FAST
@given(k=st.integers(0, 12), mode=st.sampled_from(MODES), batch=st.integers(1, 5))
def test_resume_at_any_batch_gives_the_tail(k, mode, batch):
    # AugDS draws from each worker's generators, so the worker RNG must resume too.
    def make_loader():
        return make(AugDS(), mode, batch_size=batch, shuffle=True)

    full, tail = run_with_resume(make_loader, min(k, N // batch), epochs=2)
    assert_same_batches(tail, full[min(k, N // batch) :])


@FAST
@given(k=st.integers(0, 12), batch=st.integers(1, 5))
def test_resume_in_the_calling_thread(k, batch):
    # num_workers=0 reads in the caller's thread, from the caller's global generators
    # (as torch does), which are not the loader's to save: a deterministic dataset here.
    def make_loader():
        return make(DictDS(), {"num_workers": 0}, batch_size=batch, shuffle=True)

    full, tail = run_with_resume(make_loader, min(k, N // batch), epochs=2)
    assert_same_batches(tail, full[min(k, N // batch) :])


@FAST
@given(k=st.integers(0, 14), batch=st.sampled_from([None, 2, 3]))
def test_resume_iterable_dataset_with_uneven_shards(k, batch):
    def make_loader():
        return DataLoader(ShardedIterDS(), batch_size=batch, **THREADS)

    full, tail = run_with_resume(make_loader, min(k, 7))
    assert_same_batches(tail, full[min(k, 7) :])


def test_resume_process_workers():
    def make_loader():
        return make(
            AugDS(),
            {"num_workers": 2, "worker_kind": "process", "multiprocessing_context": "fork"},
            batch_size=3,
            shuffle=True,
        )

    full, tail = run_with_resume(make_loader, 3)
    assert_same_batches(tail, full[3:])


def test_state_from_thread_workers_resumes_in_process_workers():
    # Thread workers' own generators are seeded like process workers' globals, and the
    # state carries their states in one format: the kinds are interchangeable.
    procs = {"num_workers": 2, "worker_kind": "process", "multiprocessing_context": "fork"}
    with make(AugDS(), procs, batch_size=3, shuffle=True) as loader:
        full = list(loader)
    with make(AugDS(), THREADS, batch_size=3, shuffle=True) as loader:
        it = iter(loader)
        for _ in range(4):
            next(it)
        state = loader.state_dict()
    with make(AugDS(), procs, batch_size=3, shuffle=True) as loader:
        loader.load_state_dict(state)
        assert_same_batches(list(loader), full[4:])


def test_resume_without_generator_uses_the_saved_shuffle():
    def make_loader():
        return DataLoader(TupleDS(), batch_size=4, shuffle=True, **THREADS)

    torch.manual_seed(11)
    with make_loader() as loader:
        full = list(loader)
        torch.manual_seed(11)
        it = iter(loader)
        next(it)
        next(it)
        state = loader.state_dict()
    torch.manual_seed(999)  # a different global RNG: the saved epoch seed must win
    with make_loader() as again:
        again.load_state_dict(state)
        assert_same_batches(list(again), full[2:])


@FAST
@given(
    workers=st.integers(0, 3),
    batch=st.integers(1, 8),
    drop_last=st.booleans(),
    in_order=st.booleans(),
)
def test_every_index_once_per_epoch(workers, batch, drop_last, in_order):
    kind = {"worker_kind": "thread"} if workers else {}
    with DataLoader(
        DictDS(),
        batch_size=batch,
        shuffle=True,
        drop_last=drop_last,
        num_workers=workers,
        in_order=in_order,
        **kind,
    ) as loader:
        for _ in range(2):
            seen = [int(i) for b in loader for i in b["y"]]
            expected = (N // batch) * batch if drop_last else N
            assert len(seen) == expected
            assert len(set(seen)) == expected
            assert set(seen) <= set(range(N))


def test_resume_out_of_order_loader_yields_the_rest_once():
    def make_loader():
        return make(DictDS(), THREADS, batch_size=2, shuffle=True, in_order=False)

    with make_loader() as first:
        it = iter(first)
        got = [int(i) for _ in range(4) for i in next(it)["y"]]
        state = first.state_dict()
    with make_loader() as second:
        second.load_state_dict(state)
        rest = [int(i) for b in second for i in b["y"]]
    assert sorted(got + rest) == list(range(N))


def test_state_at_epoch_end_starts_the_next_epoch(tmp_path):
    def make_loader():
        return make(DictDS(), THREADS, batch_size=5, shuffle=True)

    with make_loader() as loader:
        full = list(loader) + list(loader)
    with make_loader() as loader:
        list(loader)
        save_state(loader.state_dict(), tmp_path / "loader.json")
    with make_loader() as loader:
        loader.load_state_dict(load_state(tmp_path / "loader.json"))
        assert_same_batches(list(loader), full[len(full) // 2 :])


def test_state_is_versioned_plain_data_saved_atomically(tmp_path):
    path = tmp_path / "state.json"
    with make(DictDS(), THREADS, batch_size=4, shuffle=True) as loader:
        it = iter(loader)
        next(it)
        state = loader.state_dict()
        assert state["version"] == 1
        save_state(state, path)
        assert load_state(path) == json.loads(json.dumps(state))
        # A state that is not JSON leaves the previous file untouched and no temp file.
        with pytest.raises(TypeError, match="not plain JSON"):
            save_state({"bad": object()}, path)
        assert load_state(path)["version"] == 1
        assert os.listdir(tmp_path) == ["state.json"]
        with pytest.raises(ValueError, match="version"):
            loader.load_state_dict({"version": 99})


def test_persistent_workers_match_torch_across_epochs():
    kw = {"batch_size": 4, "shuffle": True, "num_workers": 2}
    torch.manual_seed(3)
    ours_loader = DataLoader(AugDS(), persistent_workers=True, worker_kind="thread", **kw)
    with ours_loader:
        ours = list(ours_loader) + list(ours_loader)
    torch.manual_seed(3)
    theirs_loader = torch.utils.data.DataLoader(
        AugDS(), persistent_workers=True, multiprocessing_context="fork", **kw
    )
    theirs = list(theirs_loader) + list(theirs_loader)
    del theirs_loader
    assert_same_batches(ours, theirs)


def test_resuming_with_another_worker_count_says_what_to_pass():
    with make(DictDS(), THREADS, batch_size=4) as loader:
        it = iter(loader)
        next(it)
        state = loader.state_dict()
    three = {"num_workers": 3, "worker_kind": "thread"}
    # Refused when loaded, not at the next iter().
    with make(DictDS(), three, batch_size=4) as loader, pytest.raises(
        StateError, match="has 2 workers but this loader runs 3; pass num_workers=2"
    ):
        loader.load_state_dict(state)
