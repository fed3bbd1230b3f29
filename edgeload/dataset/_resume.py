"""The DataLoader's state: plain, versioned JSON data."""

from __future__ import annotations

from typing import Any

from ..checkpoint import KEY_VERSION, check_version
from ._sampling import KEY_GENERATOR_STATE, _decode_state, _encode_state
from ._state import LoaderState

STATE_VERSION = 1

KEY_EPOCH = "epoch"
KEY_ORDER = "order"
KEY_PROGRESS = "progress"
KEY_NUM_WORKERS = "num_workers"
KEY_WORKER_KIND = "worker_kind"
KEY_SKIPPED = "samples_skipped"
# The key in an epoch's order state of the DataPipe shuffle seed.
KEY_SHARED_SEED = "shared_seed"


def loader_state(
    state: LoaderState,
    *,
    num_workers: int,
    worker_kind: str,
    live: tuple[dict[str, Any], dict[str, Any]] | None,
    generator: Any,
) -> dict[str, Any]:
    """``loader.state_dict()``: the live epoch's snapshot and progress, or the boundary.

    Args:
        state: the loader's counters (and a loaded state not yet resumed).
        num_workers, worker_kind: as resolved.
        live: the live epoch's order state and progress, if one is in progress.
        generator: the loader's ``generator`` (its state is kept at a boundary).
    """
    skipped = state.counters["samples_skipped"]
    if state.resume is not None:
        return {**state.resume, KEY_SKIPPED: skipped}
    out: dict[str, Any] = {
        KEY_VERSION: STATE_VERSION,
        KEY_EPOCH: state.epoch,
        KEY_NUM_WORKERS: num_workers,
        KEY_WORKER_KIND: worker_kind,
        KEY_SKIPPED: skipped,
    }
    if live is not None:
        out[KEY_ORDER], out[KEY_PROGRESS] = live
    elif generator is not None:
        # At an epoch boundary the next epoch draws from the generator: keep its state.
        out[KEY_GENERATOR_STATE] = _encode_state(generator)
    return out


def apply_loader_state(state: LoaderState, saved: dict[str, Any], *, generator: Any) -> None:
    """``loader.load_state_dict(saved)``: resume at the next ``iter()`` (the caller has
    ended the live epoch first).

    Raises:
        ValueError: not a loader state, or one of another version.
    """
    check_version(saved, "DataLoader", STATE_VERSION)
    state.counters["samples_skipped"] = int(saved.get(KEY_SKIPPED, 0))
    if KEY_ORDER in saved:
        state.resume = dict(saved)
    else:
        state.epoch = int(saved[KEY_EPOCH])
        if generator is not None and KEY_GENERATOR_STATE in saved:
            _decode_state(generator, saved[KEY_GENERATOR_STATE])
