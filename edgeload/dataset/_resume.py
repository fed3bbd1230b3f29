"""The DataLoader's state: plain, versioned JSON data."""

from __future__ import annotations

from typing import Any

from ..checkpoint import KEY_VERSION, check_version
from ._sampling import (
    KEY_GENERATOR_STATE,
    EpochOrder,
    _decode_state,
    _encode_state,
    draw_shared_seed,
    is_iter_datapipe,
)
from ._settings import LoaderSettings
from ._state import KEY_TASKS_DONE, LoaderState

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


def begin_epoch(
    state: LoaderState, order: EpochOrder, settings: LoaderSettings, *, keep_seed: bool
) -> tuple[int | None, dict[str, Any] | None]:
    """Where the next epoch starts: the loaded state (used up), or fresh draws.

    Sets ``state.epoch`` (on a resume) and ``state.base_seed`` (kept as it is with
    ``keep_seed``: persistent workers go on with theirs).

    Returns:
        The epoch's DataPipe shuffle seed (or None) and the progress to resume (or None).
    """
    resume, state.resume = state.resume, None
    shared: int | None = None
    progress: dict[str, Any] | None = None
    if resume is not None:
        state.epoch = int(resume[KEY_EPOCH])
        shared = resume[KEY_ORDER].get(KEY_SHARED_SEED)
        progress = resume[KEY_PROGRESS]
        skip = int(resume[KEY_PROGRESS][KEY_TASKS_DONE])
        state.base_seed = order.resume(resume[KEY_ORDER], skip=skip)
    else:
        if is_iter_datapipe(settings.dataset):
            # torch draws the pipe's shuffle seed first, then the workers' base seed.
            shared = draw_shared_seed(settings.generator)
        state.base_seed = order.start(base_seed=state.base_seed if keep_seed else None)
    if shared is not None:
        order.state[KEY_SHARED_SEED] = shared
    return shared, progress
