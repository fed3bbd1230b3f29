"""The DataLoader's state: its counters across epochs, one epoch's progress, and the
plain, versioned JSON data ``state_dict()`` gives and ``load_state_dict()`` takes.

An epoch's state is small because each worker handles its tasks in order: how many
tasks were yielded (and, out of order, which ones ahead of that), the worker the next
iterable task goes to, and per worker the random state (and for iterable datasets the
samples drawn) as of its last batch that was yielded.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any

from ..checkpoint import KEY_LOADER, KEY_VERSION, check_version
from ..errors import StateError, WorkerError
from ._sampling import (
    KEY_BASE_SEED,
    KEY_GENERATOR_STATE,
    KEY_SAMPLER_GENERATOR_STATE,
    KEY_SAMPLER_SEED,
    EpochOrder,
    _decode_state,
    _encode_state,
    draw_shared_seed,
    is_iter_datapipe,
)
from ._settings import LoaderSettings
from ._worker import Result, WorkerStart, check_rng

_log = logging.getLogger("edgeload")

# Keys of the epoch part of the loader state (saved states carry them: never rename).
KEY_TASKS_DONE = "tasks_done"
KEY_AHEAD = "yielded_ahead"
KEY_WORKERS = "workers"
KEY_NEXT_WORKER = "next_worker"
KEY_W_RNG = "rng"
KEY_W_CONSUMED = "samples_drawn"
KEY_W_ENDED = "ended"

# Skipped samples remembered for stats(), newest last.
SKIP_MEMORY = 32


@dataclass
class LoaderState:
    """A loader's counters across epochs; each epoch adds to them."""

    epoch: int = 0
    """The epoch the next ``iter()`` starts (or resumes)."""
    counters: dict[str, int] = field(
        default_factory=lambda: {"batches": 0, "samples_skipped": 0, "epochs": 0}
    )
    skips: list[tuple[Any, str]] = field(default_factory=list)
    """(index, error) of the last ``SKIP_MEMORY`` samples skipped."""
    resume: dict[str, Any] | None = None
    """A loaded mid-epoch state, for the next ``iter()`` to resume."""
    base_seed: int | None = None
    """The live (or last) epoch's base seed; persistent workers keep it."""

    def count_skips(
        self, skipped: list[tuple[Any, str]], *, epoch_skips: int, max_skips: int
    ) -> int:
        """Count the samples a task skipped; returns the epoch's count so far.

        Raises:
            WorkerError: the epoch has skipped more than ``max_skips``.
        """
        for index, message in skipped:
            epoch_skips += 1
            self.counters["samples_skipped"] += 1
            self.skips = [*self.skips[-(SKIP_MEMORY - 1) :], (index, message)]
            _log.warning("edgeload: DataLoader skipped sample %r: %s", index, message)
            if epoch_skips > max_skips:
                raise WorkerError(
                    f"sample {index!r} failed ({message}): {epoch_skips} samples skipped "
                    f"this epoch, more than max_skips={max_skips}; fix the dataset or raise "
                    "max_skips",
                    index=index,
                )
        return epoch_skips

    def finish_epoch(self) -> None:
        self.epoch += 1
        self.counters["epochs"] += 1


class EpochProgress:
    """Which tasks of one epoch were yielded, and each worker's state as of then."""

    def __init__(self, num_workers: int) -> None:
        self.num_workers = num_workers
        self.yielded = 0
        """Tasks 0..yielded-1 were all yielded."""
        self.ahead: set[int] = set()
        """Tasks past ``yielded`` that were yielded too (``in_order=False``)."""
        self.resume_next = 0
        """The worker after the one whose batch was yielded last: where a resume starts."""
        self.workers: list[dict[str, Any]] = [{} for _ in range(num_workers)]
        self.ended: set[int] = set()
        """Iterable datasets: workers whose stream has ended."""
        self._cycle_next = 0

    def load(self, saved: dict[str, Any]) -> None:
        """Continue from the progress part of a saved state.

        Raises:
            StateError: the state was saved with another number of workers.
        """
        workers = saved.get(KEY_WORKERS, [])
        _check_worker_count(len(workers), self.num_workers)
        self.yielded = int(saved[KEY_TASKS_DONE])
        self.ahead = {int(p) for p in saved.get(KEY_AHEAD, [])}
        self.resume_next = self._cycle_next = int(saved.get(KEY_NEXT_WORKER, 0))
        for w, ws in enumerate(workers or [{}] * self.num_workers):
            self.workers[w] = dict(ws)
            if ws.get(KEY_W_ENDED):
                self.ended.add(w)

    def worker_starts(
        self, base_seed: int, shared_seed: int | None, iterable: bool
    ) -> list[WorkerStart]:
        """How each worker begins: fresh, or where its last yielded batch left it."""
        return [
            WorkerStart(
                base_seed,
                shared_seed=shared_seed,
                # An iterable's worker redraws its samples instead (skip_samples).
                rng=None if iterable else ws.get(KEY_W_RNG),
                skip_samples=int(ws.get(KEY_W_CONSUMED, 0)),
                ended=bool(ws.get(KEY_W_ENDED, False)),
            )
            for ws in self.workers
        ]

    def state(self) -> dict[str, Any]:
        """The JSON-ready state after the batches yielded so far."""
        return {
            KEY_TASKS_DONE: self.yielded,
            KEY_AHEAD: sorted(self.ahead),
            KEY_NEXT_WORKER: self.resume_next,
            KEY_WORKERS: [dict(w) for w in self.workers],
        }

    def assign(self, position: int, *, iterable: bool) -> int | None:
        """The worker for task ``position`` (None: every iterable stream has ended)."""
        if not iterable:
            return position % self.num_workers
        for _ in range(self.num_workers):
            w = self._cycle_next
            self._cycle_next = (w + 1) % self.num_workers
            if w not in self.ended:
                return w
        return None

    def record(self, result: Result, *, iterable: bool) -> bool:
        """Keep the worker's state after ``result``; True when its stream ended (the
        task then counts as yielded, with nothing to yield)."""
        w = result.worker_id
        self.workers[w][KEY_W_RNG] = result.rng
        self.workers[w][KEY_W_CONSUMED] = result.consumed
        if result.ended:
            self.workers[w][KEY_W_ENDED] = True
            self.ended.add(w)
            self.mark_yielded(result.position)
            return True
        if iterable:
            self.resume_next = (w + 1) % self.num_workers
        return False

    def mark_yielded(self, position: int) -> None:
        if position == self.yielded:
            self.yielded += 1
            while self.yielded in self.ahead:
                self.ahead.discard(self.yielded)
                self.yielded += 1
        else:
            self.ahead.add(position)


# The loader state: plain, versioned JSON data -----------------------------------------

STATE_VERSION = 1
LOADER = "DataLoader"

KEY_EPOCH = "epoch"
KEY_ORDER = "order"
KEY_PROGRESS = "progress"
KEY_NUM_WORKERS = "num_workers"
KEY_WORKER_KIND = "worker_kind"
KEY_SKIPPED = "samples_skipped"
# The key in an epoch's order state of the DataPipe shuffle seed.
KEY_SHARED_SEED = "shared_seed"
# What the state's epoch was drawn over; a mid-epoch state resumes only onto the same.
# States saved before these keys existed lack them (still version 1: older edgeload
# ignores them): for those, what the state does carry is checked.
KEY_DATASET_LENGTH = "dataset_length"
KEY_SAMPLER = "sampler"
KEY_BATCH_SIZE = "batch_size"


@dataclass(frozen=True)
class StateFit:
    """What a loader's epoch is drawn over: a mid-epoch state must match it."""

    dataset_length: int | None
    """``len(dataset)`` of a map-style dataset (None: iterable, or no ``len``)."""
    sampler: str
    """The index sampler's kind: ``"BatchSampler(RandomSampler)"`` and the like."""
    batch_size: int | None
    batches: int | None
    """Tasks per epoch (``len(loader)`` of a map-style dataset; None: unknown)."""

    def state(self) -> dict[str, Any]:
        return {
            KEY_DATASET_LENGTH: self.dataset_length,
            KEY_SAMPLER: self.sampler,
            KEY_BATCH_SIZE: self.batch_size,
        }


def state_fit(sampling: Any, dataset: Any) -> StateFit:
    """The :class:`StateFit` of a loader with ``sampling`` over ``dataset``."""
    index_sampler = sampling.index_sampler
    kind = type(index_sampler).__name__
    inner = getattr(index_sampler, "sampler", None)
    if inner is not None:
        kind += f"({type(inner).__name__})"
    length = batches = None
    if not sampling.iterable:
        with contextlib.suppress(TypeError, NotImplementedError):
            length = len(dataset)
        with contextlib.suppress(TypeError, NotImplementedError):
            batches = len(index_sampler)
    return StateFit(length, kind, sampling.batch_size, batches)


def loader_state(
    state: LoaderState,
    *,
    num_workers: int,
    worker_kind: str,
    fit: StateFit,
    live: tuple[dict[str, Any], dict[str, Any]] | None,
    generator: Any,
) -> dict[str, Any]:
    """``loader.state_dict()``: the live epoch's snapshot and progress, or the boundary.

    Args:
        state: the loader's counters (and a loaded state not yet resumed).
        num_workers, worker_kind: as resolved.
        fit: what the loader's epochs are drawn over.
        live: the live epoch's order state and progress, if one is in progress.
        generator: the loader's ``generator`` (its state is kept at a boundary).
    """
    skipped = state.counters["samples_skipped"]
    if state.resume is not None:
        return {**state.resume, KEY_SKIPPED: skipped}
    out: dict[str, Any] = {
        KEY_VERSION: STATE_VERSION,
        KEY_LOADER: LOADER,
        KEY_EPOCH: state.epoch,
        KEY_NUM_WORKERS: num_workers,
        KEY_WORKER_KIND: worker_kind,
        KEY_SKIPPED: skipped,
        **fit.state(),
    }
    if live is not None:
        out[KEY_ORDER], out[KEY_PROGRESS] = live
    elif generator is not None:
        # At an epoch boundary the next epoch draws from the generator: keep its state.
        out[KEY_GENERATOR_STATE] = _encode_state(generator)
    return out


def apply_loader_state(
    state: LoaderState,
    saved: Any,
    *,
    generator: Any,
    fit: StateFit,
    num_workers: int | None,
) -> None:
    """``loader.load_state_dict(saved)``: check it all now, resume at the next ``iter()``
    (the caller has ended the live epoch first).

    Args:
        fit: what this loader's epochs are drawn over.
        num_workers: this loader's resolved worker count (None: not known yet).

    Raises:
        StateError: not a DataLoader state, one of another version, a key of the wrong
            type or out of range, or a mid-epoch state of another dataset length,
            sampler, batch size or worker count.
    """
    check_loader_state(saved, fit=fit, num_workers=num_workers)
    state.counters["samples_skipped"] = int(saved.get(KEY_SKIPPED, 0))
    if KEY_ORDER in saved:
        state.resume = dict(saved)
    else:
        state.epoch = int(saved[KEY_EPOCH])
        if generator is not None and KEY_GENERATOR_STATE in saved:
            _decode_state(generator, saved[KEY_GENERATOR_STATE])


# Checking a loaded state, key by key ----------------------------------------------------

_AFRESH = "or start afresh without load_state_dict()"


def _bad(key: str, got: Any, wanted: str, todo: str = "") -> StateError:
    shown = repr(got)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    todo = todo or (
        "pass what DataLoader.state_dict() returned, unedited (edgeload.save_state / "
        f"load_state keep it as it was), {_AFRESH}"
    )
    return StateError(f"DataLoader state: {key} must be {wanted}, got {shown}; {todo}")


def _int(
    d: dict[str, Any],
    key: str,
    where: str,
    *,
    low: int = 0,
    high: int | None = None,
    required: bool = True,
) -> int | None:
    if key not in d:
        if required:
            raise _bad(where + key, "nothing (the key is missing)", "present")
        return None
    value = d[key]
    ok = isinstance(value, int) and not isinstance(value, bool)
    if not ok or value < low or (high is not None and value > high):
        span = f">= {low}" if high is None else f"between {low} and {high}"
        raise _bad(where + key, value, f"an int {span}")
    return int(value)


def _dict(d: dict[str, Any], key: str, where: str = "") -> dict[str, Any]:
    value = d.get(key)
    if not isinstance(value, dict):
        raise _bad(where + key, value, "a JSON object (a dict)")
    return value


def _random_state(d: dict[str, Any], key: str, where: str) -> None:
    """A base64 torch generator state under ``key``, if present."""
    if key not in d:
        return
    from .._deps import require_torch

    try:
        _decode_state(require_torch().Generator(), d[key])
    except Exception as exc:  # what torch and base64 raise for bad bytes varies
        raise _bad(where + key, d[key], f"a saved torch generator state ({exc})") from exc


def _same(saved: dict[str, Any], key: str, here: Any, what: str) -> None:
    """A mid-epoch state resumes only onto the same ``key`` (when both are known)."""
    if saved.get(key) is None or here is None or saved[key] == here:
        return
    raise StateError(
        f"DataLoader state: {key} is {saved[key]!r} but this loader's is {here!r}: the "
        f"state's epoch was drawn over another {what}, so resuming it would yield other "
        f"samples; load it into a loader over the same dataset with the same "
        f"arguments, {_AFRESH}"
    )


def _check_worker_count(saved: int, running: int) -> None:
    if saved not in (0, running):
        raise StateError(
            f"DataLoader state: progress.workers has {saved} workers but this loader runs "
            f"{running}; pass num_workers={saved} (threads or processes, either resumes "
            f"exactly), {_AFRESH}"
        )


def check_loader_state(saved: Any, *, fit: StateFit, num_workers: int | None) -> None:
    """Raise :class:`StateError` unless ``saved`` is a DataLoader state that this
    loader (``fit``, ``num_workers``) can resume; every key is checked."""
    check_version(saved, LOADER, STATE_VERSION, key=KEY_EPOCH)
    _int(saved, KEY_EPOCH, "")
    _int(saved, KEY_SKIPPED, "", required=False)
    _int(saved, KEY_NUM_WORKERS, "", required=False)
    kind = saved.get(KEY_WORKER_KIND, "main")
    if kind not in ("main", "thread", "process"):
        raise _bad(KEY_WORKER_KIND, kind, "'main', 'thread' or 'process'")
    for key in (KEY_DATASET_LENGTH, KEY_BATCH_SIZE):
        if saved.get(key) is not None:
            _int(saved, key, "")
    if saved.get(KEY_SAMPLER) is not None and not isinstance(saved[KEY_SAMPLER], str):
        raise _bad(KEY_SAMPLER, saved[KEY_SAMPLER], "a sampler's name (a str)")
    _random_state(saved, KEY_GENERATOR_STATE, "")
    if KEY_ORDER not in saved and KEY_PROGRESS not in saved:
        return  # between epochs: the next epoch is drawn afresh, over any dataset
    # A mid-epoch state: the rest of the epoch is rebuilt from its order, so it must
    # be the same order over the same data.
    _same(saved, KEY_DATASET_LENGTH, fit.dataset_length, "dataset length")
    _same(saved, KEY_SAMPLER, fit.sampler, "sampler (shuffle=, sampler=, batch_sampler=)")
    _same(saved, KEY_BATCH_SIZE, fit.batch_size, "batch size")
    _check_order(_dict(saved, KEY_ORDER))
    _check_progress(_dict(saved, KEY_PROGRESS), fit=fit, num_workers=num_workers)


def _check_order(order: dict[str, Any]) -> None:
    where = f"{KEY_ORDER}."
    _int(order, KEY_BASE_SEED, where, low=-(2**63), high=2**64 - 1)
    _int(order, KEY_SAMPLER_SEED, where, low=-(2**63), high=2**64 - 1, required=False)
    if order.get(KEY_SHARED_SEED) is not None:
        _int(order, KEY_SHARED_SEED, where, low=-(2**63), high=2**64 - 1)
    _random_state(order, KEY_GENERATOR_STATE, where)
    _random_state(order, KEY_SAMPLER_GENERATOR_STATE, where)


def _check_progress(progress: dict[str, Any], *, fit: StateFit, num_workers: int | None) -> None:
    where = f"{KEY_PROGRESS}."
    batches = fit.batches
    if batches is not None:
        done = progress.get(KEY_TASKS_DONE)
        if isinstance(done, int) and not isinstance(done, bool) and done > batches:
            raise StateError(
                f"DataLoader state: {where}{KEY_TASKS_DONE} is {done}, past the end of "
                f"this loader's epoch of {batches} batches: the state is from a longer "
                f"dataset or a smaller batch_size; load it into a loader built as the one "
                f"that saved it, {_AFRESH}"
            )
    done = _int(progress, KEY_TASKS_DONE, where, high=batches)
    ahead = progress.get(KEY_AHEAD, [])
    if not isinstance(ahead, list):
        raise _bad(where + KEY_AHEAD, ahead, "a list of batch positions")
    last = batches - 1 if batches is not None else None
    for i, position in enumerate(ahead):
        key = f"{KEY_AHEAD}[{i}]"
        _int({key: position}, key, where, low=int(done or 0) + 1, high=last)
    workers = progress.get(KEY_WORKERS, [])
    if not isinstance(workers, list):
        raise _bad(where + KEY_WORKERS, workers, "a list with one object per worker")
    if num_workers is not None:
        _check_worker_count(len(workers), max(1, num_workers))
    count = max(1, len(workers), num_workers or 0)
    _int(progress, KEY_NEXT_WORKER, where, high=count - 1, required=False)
    for w, ws in enumerate(workers):
        at = f"{where}{KEY_WORKERS}[{w}]."
        if not isinstance(ws, dict):
            raise _bad(at[:-1], ws, "a JSON object (a dict)")
        _int(ws, KEY_W_CONSUMED, at, required=False)
        if not isinstance(ws.get(KEY_W_ENDED, False), bool):
            raise _bad(at + KEY_W_ENDED, ws[KEY_W_ENDED], "true or false")
        if ws.get(KEY_W_RNG) is not None:
            try:
                check_rng(ws[KEY_W_RNG])
            except Exception as exc:  # what the generators raise for a bad state varies
                raise _bad(at + KEY_W_RNG, ws[KEY_W_RNG], f"a saved random state ({exc})") from exc


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
