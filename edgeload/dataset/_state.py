"""The DataLoader's state: its counters across epochs, one epoch's progress, and the
plain, versioned JSON data ``state_dict()`` gives and ``load_state_dict()`` takes.

An epoch's state is small because each worker handles its tasks in order: how many
tasks were yielded (and, out of order, which ones ahead of that), the worker the next
iterable task goes to, and per worker the random state (and for iterable datasets the
samples drawn) as of its last batch that was yielded.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from ..checkpoint import KEY_VERSION, check_version
from ..errors import WorkerError
from ._sampling import (
    KEY_GENERATOR_STATE,
    EpochOrder,
    _decode_state,
    _encode_state,
    draw_shared_seed,
    is_iter_datapipe,
)
from ._settings import LoaderSettings
from ._worker import Result, WorkerStart

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
            ValueError: the state was saved with another number of workers.
        """
        workers = saved.get(KEY_WORKERS, [])
        if len(workers) not in (0, self.num_workers):
            raise ValueError(
                f"the saved loader state has {len(workers)} workers but this loader runs "
                f"{self.num_workers}; pass num_workers={len(workers)} (threads or processes, "
                "either resumes exactly)"
            )
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
