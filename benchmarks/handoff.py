"""Hand-off cost per item: edgeload slots (thread and process workers) against torch's DataLoader.

The workload is the same on every side: each item is produced by copying an
``nbytes`` source array (the stand-in for decoding or collating), and the consumer turns
it into a tensor with ``torch.from_numpy`` / receives torch's tensor and drops it. torch's
dataset writes into a fresh tensor, which its worker then moves into a new shared-memory
segment for the trip; edgeload's worker writes straight into a reused slot and sends only
the slot index. What differs is therefore the hand-off, not the work.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np

from edgeload.measure import tree_pss_bytes
from edgeload.pipeline.slots import Slot, SlotPool, SlotRef, attach
from edgeload.pipeline.workers import WorkerPool

MIB = 1 << 20
DEPTH = 4  # tasks in flight, like torch's prefetch_factor=2 x 2 workers
NUM_WORKERS = 2

_sources: dict[int, np.ndarray] = {}


def _source(nbytes: int) -> np.ndarray:
    src = _sources.get(nbytes)
    if src is None:
        src = _sources[nbytes] = np.full(nbytes, 7, dtype=np.uint8)
    return src


def fill_slot(slot: Slot) -> int:
    """Thread worker: produce the item straight into the slot."""
    np.copyto(slot.array, _source(slot.array.nbytes))
    return slot.index


def fill_ref(ref: SlotRef) -> int:
    """Process worker: produce the item straight into the shared slot."""
    out = attach(ref)
    np.copyto(out, _source(out.nbytes))
    return ref.slot_index


class EdgeloadHandoff:
    """A slot pool and 2 workers; ``run(n)`` moves n items to the consumer."""

    def __init__(self, kind: str, nbytes: int) -> None:
        self.kind = kind
        shared = kind == "process"
        self.slots = SlotPool((nbytes,), np.uint8, count=DEPTH + 2, shared=shared)
        self.pool = WorkerPool(
            fill_ref if shared else fill_slot,
            kind=kind,  # type: ignore[arg-type]
            num_workers=NUM_WORKERS,
            timeout_s=60,
            name="bench",
        )
        self.run(8)  # workers started, pages touched

    def run(self, n: int) -> None:
        import torch

        held: dict[int, Slot] = {}
        submitted = done = 0
        while done < n:
            while submitted < n and len(held) < DEPTH:
                slot = self.slots.acquire(timeout_s=60)
                task = slot.ref if self.kind == "process" else slot
                held[self.pool.submit(task)] = slot
                submitted += 1
            result = self.pool.get()
            tensor = torch.from_numpy(self.slots.lease(held.pop(result.index)))
            del tensor
            done += 1

    def close(self) -> dict[str, Any]:
        stats = self.slots.stats()
        self.pool.close()
        self.slots.close()
        return {"copies": stats.copies}


class _Produce:
    """torch map-style dataset: each item a fresh tensor filled from the source."""

    def __init__(self, nbytes: int, length: int) -> None:
        self.nbytes, self.length = nbytes, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Any:
        import torch

        out = torch.empty(self.nbytes, dtype=torch.uint8)
        np.copyto(out.numpy(), _source(self.nbytes))
        return out


class TorchHandoff:
    """torch.utils.data.DataLoader, 2 persistent worker processes, batch_size=None."""

    def __init__(self, nbytes: int, length: int) -> None:
        from torch.utils.data import DataLoader

        self.loader = DataLoader(
            _Produce(nbytes, length),  # type: ignore[arg-type]
            batch_size=None,
            num_workers=NUM_WORKERS,
            prefetch_factor=DEPTH // NUM_WORKERS,
            persistent_workers=True,
        )
        self.length = length
        self.run(length)  # workers started

    def run(self, n: int) -> None:
        if n != self.length:
            raise ValueError("TorchHandoff runs whole epochs")
        for tensor in self.loader:
            del tensor

    def close(self) -> dict[str, Any]:
        it = getattr(self.loader, "_iterator", None)
        if it is not None:
            it._shutdown_workers()
        return {}


KINDS = ("thread", "process", "torch")


def make_runner(kind: str, nbytes: int, items: int) -> EdgeloadHandoff | TorchHandoff:
    """The set-up for one peer: ``thread``/``process`` (edgeload) or ``torch``."""
    if kind == "torch":
        return TorchHandoff(nbytes, items)
    return EdgeloadHandoff(kind, nbytes)


def measure(kind: str, nbytes: int, *, items: int, repeats: int) -> dict[str, Any]:
    """Median and spread of seconds per item over ``repeats`` runs of ``items`` items."""
    runner = make_runner(kind, nbytes, items)
    per_item = []
    try:
        for _ in range(repeats):
            t0 = time.perf_counter()
            runner.run(items)
            per_item.append((time.perf_counter() - t0) / items)
        pss = tree_pss_bytes()
    finally:
        extra = runner.close()
    return {
        "kind": kind,
        "nbytes": nbytes,
        "median_s": statistics.median(per_item),
        "min_s": min(per_item),
        "max_s": max(per_item),
        "pss_bytes": pss,
        **extra,
    }


def report(sizes_mib: list[int], *, items: int, repeats: int) -> list[dict[str, Any]]:
    """Measure every peer at every size; add ``torch_ratio`` (torch median / this median)."""
    rows = []
    for size in sizes_mib:
        nbytes = size * MIB
        found = {kind: measure(kind, nbytes, items=items, repeats=repeats) for kind in KINDS}
        for row in found.values():
            row["size_mib"] = size
            row["copy_s"] = copy_cost(nbytes)
            row["torch_ratio"] = found["torch"]["median_s"] / row["median_s"]
            rows.append(row)
    return rows


def copy_cost(nbytes: int, *, repeats: int = 20) -> float:
    """Median seconds of the one copy that produces an item (the work on every side)."""
    src, dst = _source(nbytes), np.empty(nbytes, np.uint8)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
