"""A thread worker's side of shared batches: claim a row, read its sample, write it.

Random state.  torch gives batch ``p`` to worker ``p % num_workers``, whose generators
draw for its samples in order; a loader whose workers share batches cannot keep that
for a dataset that draws from them (which thread reads which row is up to timing).  So
rows are shared only while no sample draws: each worker checks its generators after
every sample (:func:`~._worker_ctx.rng_fingerprint`, ~20 us against ~1.7 ms for a
decoded JPEG).  A thread reads another worker's row as that worker
(:func:`~._worker_ctx.as_worker`: its id, seed and generators, so ``initial_seed()``
and the like are torch's), with its own copy of the dataset.  A sample that drew stops
the sharing: the owner's generators are put back as they were when it began claiming, and the main thread has every batch not yet
yielded read again by its owner, as torch would have (see :mod:`._claim_flight`).
The batches yielded before drew nothing, so the numbers drawn, the batches and the
saved state are the same as without sharing.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ..errors import ClosedError
from ..pipeline.failure import Failure
from . import _collate
from ._claims import ClaimBoard, ClaimedBatch
from ._tasks import Result
from ._worker_ctx import (
    as_worker,
    numpy_gauss_pending,
    outside_worker,
    restore_rng,
    rng_fingerprint,
    snapshot_rng,
)

# How often a worker waiting for the other to set up a batch's memory looks again.
_SETUP_POLL_S = 0.005


def run_claims(fetcher: Any, board: ClaimBoard, stop: threading.Event) -> Result:
    """Fill the board's batches with the other workers until the board stops.

    Returns a result with ``position`` -1 (nothing to yield): the loop's end.
    """
    info = fetcher.info
    exact = numpy_gauss_pending(info)
    board.register(
        fetcher.worker_id, (info, snapshot_rng(info), rng_fingerprint(info, exact=exact), exact)
    )
    try:
        while True:
            claimed = board.claim(stop)
            if claimed is None:
                break
            batch, row = claimed
            _read_row(fetcher, board, batch, row, stop)
            if board.row_done(batch, row):
                board.completed(batch, _complete(board, batch))
    except Exception as exc:  # a bug, not the dataset's: the main thread raises it
        board.failed(exc)
    return Result(-1, fetcher.worker_id)


def _read_row(
    fetcher: Any,
    board: ClaimBoard,
    batch: ClaimedBatch,
    row: int,
    stop: threading.Event,
) -> None:
    index = batch.index[row]
    error: Exception | None = None
    sample: Any = None
    owner, start, before, exact = board.workers[batch.owner]
    try:
        # The thread's own dataset copy (the copies were set up alike; a copy is never
        # read by two threads), as the batch's owner: its id, seed and generators.
        with as_worker(owner):
            sample = fetcher.dataset[index]
    except Exception as exc:
        error = exc
    if rng_fingerprint(owner, exact=exact) != before:
        # Stop first: a batch another thread completes after this is read again too.
        board.halt(batch, drew=True)
        restore_rng(owner, start)
        return
    if error is not None:
        if fetcher.spec.skip_errors:
            with batch.locked():
                batch.skipped.append((row, (index, f"{type(error).__name__}: {error}")))
            return
        with batch.locked():
            if batch.failure is None or row < batch.failed_row:
                # The first failing row in order, as a worker reading them in turn sees.
                batch.failure = Failure.capture(error, pickled=False)
                batch.failed_index, batch.failed_row = index, row
        board.halt(batch)
        return
    if not _has_memory(board, batch, stop):
        return
    with batch.locked():
        if batch.cancelled:
            return
        if _collate.put_row(board.layout, batch.views, sample, row):
            batch.written.add(row)
        else:
            batch.extras[row] = sample


def _has_memory(board: ClaimBoard, batch: ClaimedBatch, stop: threading.Event) -> bool:
    """Give ``batch`` its slot (or fresh memory) once; False if it was cancelled.

    The first worker to get here waits for a slot (the user's last batch coming back)
    holding its sample; the others wait for it.
    """
    while True:
        with batch.locked():
            if batch.cancelled:
                return False
            if batch.views is not None:
                return True
            mine = not batch.setting_up
            batch.setting_up = True
        if mine:
            break
        if stop.wait(_SETUP_POLL_S):
            return False
    while not board.first_without_memory(batch):
        if stop.wait(_SETUP_POLL_S) or board.stopped:
            with batch.locked():
                batch.setting_up = False
            return False
    try:
        slot = board.acquire_slot(lambda: stop.is_set() or board.stopped)
    except ClosedError:
        slot = None
        stop_now = True
    else:
        stop_now = stop.is_set()
    with batch.locked():
        if batch.cancelled or stop_now:
            batch.setting_up = False
            keep = False
        else:
            batch.slot = slot
            batch.buf = np.empty(board.layout.nbytes, np.uint8) if slot is None else slot.array
            batch.views = _collate.batch_views(board.layout, batch.buf)
            keep = True
    if not keep and slot is not None:
        board.release_slot(slot)
    return keep


def _complete(board: ClaimBoard, batch: ClaimedBatch) -> Result | None:
    """The batch's result once all its rows are in; None if it is to be read again."""
    layout = board.layout
    with batch.locked():
        if batch.cancelled or batch.drew or board.stopped:
            return None
        result = Result(batch.position, batch.owner)
        result.skipped = [s for _, s in sorted(batch.skipped, key=lambda s: s[0])]
        if batch.failure is not None:
            result.failure, result.failed_index = batch.failure, batch.failed_index
            return result
        rows = sorted(batch.written | set(batch.extras))
        if not rows:
            result.empty = True  # every sample was skipped
            return result
        if batch.extras:  # not the layout: default_collate, the rows rebuilt as they were
            samples = [
                batch.extras[r] if r in batch.extras else _collate.read_row(layout, batch.buf, r)
                for r in rows
            ]
            try:
                with outside_worker():
                    result.data = _collate.default_collate()(samples)
            except Exception as exc:
                result.failure = Failure.capture(exc, pickled=False)
                result.failed_index = batch.index
            return result
        for dst, src in enumerate(rows):  # skipped rows leave gaps: close them up
            if dst != src:
                _collate.put_row(
                    layout, batch.views, _collate.read_row(layout, batch.buf, src), dst
                )
        if batch.slot is not None:
            result.rows = len(rows)
        else:
            result.data = _collate.read_batch(layout, batch.buf, len(rows))
        return result
