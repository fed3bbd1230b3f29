"""The DataLoader's argument checks and its state: plain, versioned JSON data."""

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
KINDS = ("auto", "thread", "process")


def check_arguments(
    *,
    num_workers: Any,
    timeout: float,
    worker_kind: str,
    on_error: str,
    max_skips: Any,
    prefetch_factor: int | None,
    persistent_workers: bool,
    prefetch_bytes: int | None,
) -> None:
    """Reject bad DataLoader arguments (torch's wording where torch has a check).

    Raises:
        ValueError: naming the argument, the value and what to pass instead.
    """
    if num_workers != "auto" and (not isinstance(num_workers, int) or num_workers < 0):
        raise ValueError(
            f"num_workers must be 'auto' or an int >= 0, got {num_workers!r}; use "
            "num_workers=0 to load in the calling thread"
        )
    if timeout < 0:
        raise ValueError(f"timeout option should be non-negative, got {timeout}")
    if worker_kind not in KINDS:
        raise ValueError(f"worker_kind must be one of {KINDS}, got {worker_kind!r}")
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    if not isinstance(max_skips, int) or max_skips < 0:
        raise ValueError(f"max_skips must be an int >= 0, got {max_skips!r}")
    if prefetch_factor is not None and prefetch_factor < 0:
        raise ValueError("prefetch_factor option should be non-negative")
    if num_workers == 0 and prefetch_factor is not None:
        raise ValueError(
            "prefetch_factor option could only be specified with num_workers > 0; "
            "set prefetch_factor=None"
        )
    if persistent_workers and num_workers == 0:
        raise ValueError("persistent_workers option needs num_workers > 0")
    if prefetch_bytes is not None and prefetch_bytes < 1:
        raise ValueError(f"prefetch_bytes must be >= 1 or None, got {prefetch_bytes}")


def loader_state(loader: DataLoader) -> dict[str, Any]:
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


def apply_loader_state(loader: DataLoader, state: dict[str, Any]) -> None:
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
