"""What travels between the loader and its workers: the spec, starts, tasks, results.

Each is plain data that pickles, for process workers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..pipeline._failure import Failure
from . import _collate


@dataclass(frozen=True)
class FetchSpec:
    """Everything a worker needs, sent once (pickled, for process workers)."""

    dataset: Any
    iterable: bool
    auto_collation: bool
    collate_fn: Callable[[Any], Any] | None
    """None: the default collate, which may write into slots."""
    drop_last: bool
    worker_init_fn: Callable[[int], None] | None
    skip_errors: bool
    num_workers: int


@dataclass(frozen=True)
class WorkerStart:
    """How one worker begins (or begins again, for a new epoch or a resume)."""

    base_seed: int
    rng: list[Any] | None = None
    """A snapshot to restore after seeding (map-style resume)."""
    skip_samples: int = 0
    """Iterable datasets: samples to draw and discard first (resume)."""
    ended: bool = False
    """Iterable datasets: this worker's stream already ended (resume)."""
    shared_seed: int | None = None
    """DataPipes: the epoch's seed for the pipe's shuffles, the same in every worker."""


@dataclass(frozen=True)
class Task:
    """Read one batch (or one sample, without automatic batching)."""

    position: int
    index: Any
    """A list of indices, one index, or placeholders for an iterable dataset."""
    slot: Any = None
    """Where to write the batch: a SlotClaim (thread workers: the slot is taken when the
    worker starts writing), an ndarray (``num_workers=0``) or a SlotRef (processes)."""
    layout: _collate.SlotMap | None = None


@dataclass
class Result:
    """What a worker sends back for one task."""

    position: int
    worker_id: int
    data: Any = None
    """The collated batch, or None when written into the task's slot."""
    rows: int = 0
    """Samples written into the slot."""
    ended: bool = False
    """An iterable dataset ran out: no data for this task."""
    skipped: list[tuple[Any, str]] = field(default_factory=list)
    """(index, error) of each sample skipped because its loading raised."""
    layout: _collate.SlotMap | None = None
    """A slot layout suggested by this batch's samples (first batches only)."""
    rng: list[Any] | None = None
    consumed: int = 0
    """Iterable datasets: samples this worker has drawn so far."""
    failure: Failure | None = None
    """What loading raised, when errors are not skipped: the task yields nothing."""
    failed_index: Any = None
    """The sample whose loading raised (the task's index for a collate failure)."""
    empty: bool = False
    """Every sample of the batch was skipped: nothing to yield."""
