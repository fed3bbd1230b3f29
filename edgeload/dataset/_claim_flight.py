"""The main thread's side of shared batches: when to share, and how to stop sharing.

An epoch starts as torch runs one: task ``p`` is read whole by worker
``p % num_workers``.  Sharing (:mod:`._claims`) starts once the first batch has shown a
slot layout and every worker has delivered a batch that drew nothing from its random
generators; from then on every batch of the epoch goes to the board.  It stops early
when a sample draws (the batches not yet yielded are read again by their owners, see
:mod:`._claim_rows`) or when a batch does not fit the board.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ._claim_memory import wait_for_slot
from ._claims import ClaimBoard, ClaimedBatch, cancel
from ._settings import LoaderSettings
from ._slots import LoaderSlots
from ._tasks import ClaimTask, Result

# Off only for measuring (benchmarks/bench_dataset.py's edgeload-owner mode): workers
# then read whole batches, as before sharing existed.
SHARE_BATCHES = True


def may_share(settings: LoaderSettings, slots: LoaderSlots) -> bool:
    """Whether this epoch's workers may share batches (before anything is read)."""
    sampling = settings.sampling
    return (
        SHARE_BATCHES
        and settings.worker_kind == "thread"
        and settings.num_workers >= 2
        and slots.enabled
        and not slots.refuse_sharing
        and not sampling.iterable
        and sampling.auto_collation
        and sampling.batch_size is not None  # not a user's batch_sampler
        and settings.collate_fn is None
        and settings.in_order
        and settings.choice.memory_mode == "host"
        # A dataset's own batch read is called as it is, by one worker.
        and getattr(settings.dataset, "__getitems__", None) is None
    )


def shared_slot_count(prefetch_factor: int | None) -> int:
    """Slots for shared batches: the user's batch and ``prefetch_factor`` being filled or
    ready (default 1)."""
    return 1 + max(1, prefetch_factor or 1)


def _same_setup(setups: list[dict[str, Any]]) -> bool:
    """Whether the workers' dataset copies hold the same attributes (the same objects,
    or equal plain values)."""
    first = setups[0]
    for other in setups[1:]:
        if other.keys() != first.keys():
            return False
        for key, value in other.items():
            mine = first[key]
            if mine is value:
                continue
            plain = (int, float, str, bytes, bool, type(None))
            if not (type(mine) is type(value) and isinstance(value, plain) and mine == value):
                return False
    return True


class ClaimFlight:
    """Starts and ends the sharing of one epoch's batches."""

    def __init__(self, settings: LoaderSettings, executor: Any, slots: LoaderSlots) -> None:
        self._settings, self._exec, self._slots = settings, executor, slots
        self._allowed = may_share(settings, slots)
        self._quiet: set[int] = set()
        self._setups: dict[int, dict[str, Any]] = {}
        self.board: ClaimBoard | None = None
        self._loops = 0  # claim loops whose end has not come back from the pool

    @property
    def shared_count(self) -> int | None:
        """The slot count to make the pool with (None: the usual count)."""
        return shared_slot_count(self._settings.prefetch_factor) if self._allowed else None

    def note(self, result: Result) -> None:
        """A batch read whole by one worker came back."""
        if result.setup is not None:
            self._setups[result.worker_id] = result.setup
            if not _same_setup(list(self._setups.values())):
                # worker_init_fn set each worker's copy up its own way (a shard, an
                # offset): a sample must be read by the copy torch would read it with.
                self._allowed = False
        if result.drew:
            self._slots.refuse_sharing = True
            self._allowed = False
        elif result.failure is None:
            self._quiet.add(result.worker_id)

    def limit(self, usual: int) -> int:
        """Batches in flight: while sharing, the slots' and one more to claim ahead;
        before, while it may still start, one per worker (the first batches, whose
        layout is not known yet, are fresh memory: no more of them than needed)."""
        if self.board is not None:
            return self._slots.count + 1
        if self._allowed and not self._slots.refuse_sharing:
            return min(usual, self._settings.num_workers)
        return usual

    def takes(self, index: Any) -> bool:
        """Whether the batch of ``index`` goes to the board (sharing starts if it may)."""
        slots = self._slots
        if self.board is None:
            ready = (
                self._allowed
                and not slots.refuse_sharing
                and slots.shared_batches
                and slots.layout is not None
                and len(self._quiet) >= self._settings.num_workers
                and len(self._setups) >= self._settings.num_workers
            )
            if not ready:
                return False
            self._start(slots)
        layout = slots.layout
        return layout is not None and isinstance(index, list) and len(index) <= layout.batch_size

    def _start(self, slots: LoaderSlots) -> None:
        assert slots.layout is not None
        workers = self._settings.num_workers
        self.board = ClaimBoard(
            slots.layout,
            acquire_slot=functools.partial(wait_for_slot, slots),
            release_slot=slots.release,
            num_workers=workers,
        )
        for w in range(workers):
            self._exec.submit(w, ClaimTask(self.board))
        self._loops = workers

    def end(self, keep: Callable[[Result], None]) -> list[ClaimedBatch]:
        """Stop sharing for the rest of the epoch: wait for the claim loops to end and
        return the batches not yet taken (their slots given back), to be read again.

        ``keep`` gets any other result the pool returns meanwhile.
        """
        board, self.board, self._allowed = self.board, None, False
        if board is None:
            return []
        board.stop()
        while self._loops:
            result: Result = self._exec.get(timeout_s=self._settings.timeout_s)
            if result.position == -1:
                self._loops -= 1
            else:
                keep(result)
        batches = board.remaining()
        for batch in batches:
            self._slots.release(cancel(batch))
        return batches

    def close(self) -> None:
        """Give back the slots of batches on the board (the workers were stopped)."""
        board, self.board = self.board, None
        if board is not None:
            board.stop()
            for batch in board.remaining():
                self._slots.release(cancel(batch))
