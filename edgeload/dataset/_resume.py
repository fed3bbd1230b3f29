"""The DataLoader's state: plain, versioned JSON data."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..checkpoint import KEY_VERSION, check_version
from ._sampling import KEY_GENERATOR_STATE, _decode_state, _encode_state

if TYPE_CHECKING:
    from .loader import DataLoader

STATE_VERSION = 1

KEY_EPOCH = "epoch"
KEY_ORDER = "order"
KEY_PROGRESS = "progress"
KEY_NUM_WORKERS = "num_workers"
KEY_WORKER_KIND = "worker_kind"
KEY_SKIPPED = "samples_skipped"


def loader_state(loader: DataLoader[Any]) -> dict[str, Any]:
    """``loader.state_dict()``: the live epoch's snapshot and progress, or the boundary."""
    state: dict[str, Any] = {
        KEY_VERSION: STATE_VERSION,
        KEY_EPOCH: loader._epoch,
        KEY_NUM_WORKERS: loader._num_workers_resolved,
        KEY_WORKER_KIND: loader.worker_kind_resolved,
        KEY_SKIPPED: loader._counters["samples_skipped"],
    }
    if loader._resume is not None:
        return {**loader._resume, KEY_SKIPPED: state[KEY_SKIPPED]}
    it = loader._iter
    if it is not None and not it._done:
        state[KEY_ORDER] = dict(it._order.state)
        state[KEY_PROGRESS] = it.state()
    elif loader.generator is not None:
        # At an epoch boundary the next epoch draws from the generator: keep its state.
        state[KEY_GENERATOR_STATE] = _encode_state(loader.generator)
    return state


def apply_loader_state(loader: DataLoader[Any], state: dict[str, Any]) -> None:
    """``loader.load_state_dict(state)``: resume at the next ``iter()``.

    Raises:
        ValueError: not a loader state, or one of another version.
    """
    check_version(state, "DataLoader", STATE_VERSION)
    loader._abandon()
    loader._counters["samples_skipped"] = int(state.get(KEY_SKIPPED, 0))
    if KEY_ORDER in state:
        loader._resume = dict(state)
    else:
        loader._epoch = int(state[KEY_EPOCH])
        if loader.generator is not None and KEY_GENERATOR_STATE in state:
            _decode_state(loader.generator, state[KEY_GENERATOR_STATE])
