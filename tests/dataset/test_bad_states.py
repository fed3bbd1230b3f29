"""A DataLoader refuses, when it is loaded, a state it cannot resume: StateError naming
the key, the bad value and what to do - never an empty epoch or a raw error at iter()."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from _datasets import DictDS, N

from edgeload import DataLoader, StateError

THREADS = {"num_workers": 2, "worker_kind": "thread"}
V1 = json.loads((Path(__file__).parent / "saved_states_v1.json").read_text())


class Sized(torch.utils.data.Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.full((2,), float(i)), i


def make(ds=None, **kw):
    kw = {"batch_size": 4, "shuffle": True, **THREADS, **kw}
    return DataLoader(
        ds if ds is not None else DictDS(), generator=torch.Generator().manual_seed(5), **kw
    )


def mid_epoch_state(ds=None, k=2, **kw):
    with make(ds, **kw) as loader:
        it = iter(loader)
        for _ in range(k):
            next(it)
        return json.loads(json.dumps(loader.state_dict()))


def ys(loader):
    return [int(y) for b in loader for y in b["y"]]


def test_a_state_records_the_loader_kind_and_what_its_epoch_is_drawn_over():
    state = mid_epoch_state()
    assert state["loader"] == "DataLoader"
    assert state["dataset_length"] == N
    assert state["sampler"] == "BatchSampler(RandomSampler)"
    assert state["batch_size"] == 4


def test_tasks_done_past_the_end_is_refused_at_once():
    state = mid_epoch_state()
    state["progress"]["tasks_done"] = 99
    with make() as loader:
        with pytest.raises(
            StateError, match=r"progress\.tasks_done is 99, past the end .* 6 batches"
        ):
            loader.load_state_dict(state)
        # Nothing changed: the loader starts its epoch from the beginning.
        assert sorted(ys(loader)) == list(range(N))


def test_a_state_from_a_dataset_of_another_length_is_refused():
    state = mid_epoch_state(Sized(40))
    with make(Sized(30)) as loader, pytest.raises(
        StateError, match="dataset_length is 40 but this loader's is 30"
    ):
        loader.load_state_dict(state)


def test_a_state_from_another_sampler_or_batch_size_is_refused():
    state = mid_epoch_state()
    with make(shuffle=False) as loader, pytest.raises(
        StateError, match=r"sampler is 'BatchSampler\(RandomSampler\)'"
    ):
        loader.load_state_dict(state)
    with make(batch_size=3) as loader, pytest.raises(
        StateError, match="batch_size is 4 but this loader's is 3"
    ):
        loader.load_state_dict(state)


def test_a_state_between_epochs_fits_any_dataset():
    with make() as loader:
        list(loader)
        state = loader.state_dict()
    with make(Sized(8)) as loader:
        loader.load_state_dict(state)
        assert sorted(int(i) for _, y in loader for i in y) == list(range(8))


@pytest.mark.parametrize(
    "state",
    [
        {"version": 1, "loader": "StreamLoader", "streams": [{"uri": "a.mp4", "frame": 3}]},
        {"version": 1, "streams": [{"uri": "a.mp4", "frame": 3}]},  # saved before "loader"
    ],
)
def test_a_streamloader_state_is_refused(state):
    with make() as loader, pytest.raises(
        StateError, match=r"DataLoader\.load_state_dict\(\) got .*(StreamLoader|streams)"
    ):
        loader.load_state_dict(state)


def _edit(path, value):
    state = mid_epoch_state()
    *parents, last = path
    target = state
    for key in parents:
        target = target[key]
    if value is KeyError:
        del target[last]
    else:
        target[last] = value
    return state


@pytest.mark.parametrize(
    ("path", "value", "named"),
    [
        (("epoch",), -1, r"epoch must be an int >= 0, got -1"),
        (("epoch",), "0", r"epoch must be an int >= 0, got '0'"),
        (("version",), 2, r"version 2 is not 1"),
        (
            ("progress", "tasks_done"),
            "3",
            r"progress\.tasks_done must be an int between 0 and 6, got '3'",
        ),
        (
            ("progress", "tasks_done"),
            -5,
            r"progress\.tasks_done must be an int between 0 and 6, got -5",
        ),
        (("progress", "tasks_done"), KeyError, r"progress\.tasks_done must be present"),
        (("progress", "workers"), {}, r"progress\.workers must be a list"),
        (("progress", "next_worker"), 7, r"progress\.next_worker must be an int between 0 and 1"),
        (
            ("progress", "yielded_ahead"),
            [1],
            r"progress\.yielded_ahead\[0\] must be an int between 3 and 5",
        ),
        (("progress",), KeyError, r"progress must be a JSON object"),
        (("order", "base_seed"), None, r"order\.base_seed must be an int"),
        (("order", "sampler_seed"), 1.5, r"order\.sampler_seed must be an int"),
        (
            ("order", "generator_state"),
            "not base64!",
            r"order\.generator_state must be a saved torch generator state",
        ),
        (("samples_skipped",), -1, r"samples_skipped must be an int >= 0"),
        (("worker_kind",), "gpu", r"worker_kind must be 'main', 'thread' or 'process', got 'gpu'"),
    ],
)
def test_an_edited_state_is_refused_naming_the_key(path, value, named):
    state = _edit(path, value)
    with make() as loader:
        with pytest.raises(StateError, match=named) as info:
            loader.load_state_dict(state)
        assert "load_state_dict()" in str(info.value)  # what to do
        assert sorted(ys(loader)) == list(range(N))


def test_a_worker_random_state_that_cannot_be_restored_is_refused():
    state = mid_epoch_state()
    state["progress"]["workers"][1]["rng"] = [[3, [1, 2], None], "x", "y"]
    with make() as loader, pytest.raises(
        StateError, match=r"progress\.workers\[1\]\.rng must be a saved random state"
    ):
        loader.load_state_dict(state)


@pytest.mark.parametrize("state", [None, [], "state.json"])
def test_what_is_no_state_at_all_is_refused(state):
    with make() as loader, pytest.raises(
        StateError, match=f"must be a dict, got {type(state).__name__}"
    ):
        loader.load_state_dict(state)


def test_an_old_state_is_checked_for_what_it_has():
    # Version-1 states saved before the dataset length was recorded: what they carry is
    # still checked against this loader (dict_calling_thread: DictDS, batch_size=4).
    state = copy.deepcopy(V1["dict_calling_thread"]["state"])
    assert "dataset_length" not in state
    state["progress"]["tasks_done"] = 7
    with DataLoader(DictDS(), batch_size=4, shuffle=True) as loader, pytest.raises(
        StateError, match=r"tasks_done is 7, past the end .* 6 batches"
    ):
        loader.load_state_dict(state)
