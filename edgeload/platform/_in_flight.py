"""How many items a loader keeps in flight, and how many slots pay for them.

Both loaders size their slot pools by these rules: the DataLoader by its tasks in
flight, the StreamLoader by the frames its streams keep in flight.  The plan
(:func:`edgeload.platform._decide.choose_prefetch`) uses them for a workload whose
slot size it knows; the DataLoader once its first batch has shown the size.
"""

from __future__ import annotations

# Dataset tasks in flight per worker when ``prefetch_factor`` is not given: torch's 2,
# for thread workers too.  One per thread worker (2,000 JPEGs -> 224x224, 2 cores;
# docs/performance.md, "Datasets: the bound of two bare threads, and slots refilled on
# delivery") saves one or two batch slots (7-14 MiB of PSS) at 0.93-1.05x the speed
# (median per round, three runs) with a consumer that takes no time; but a consumer
# whose step stalls every 8th batch got 0.77-0.86x, and batches of 4 with uneven
# samples 0.87-0.93x: two stays.
PREFETCH_PER_WORKER = 2


def tasks_in_flight(num_workers: int, prefetch_factor: int | None) -> int:
    """Most dataset tasks handed to workers and not yet yielded: ``prefetch_factor`` per
    worker (at least 1; by default :data:`PREFETCH_PER_WORKER`).

    The DataLoader bounds its tasks with it, and the plan sizes a dataset's slots by it.
    """
    if num_workers <= 0:
        return 0
    per_worker = PREFETCH_PER_WORKER if prefetch_factor is None else max(1, prefetch_factor)
    return num_workers * per_worker


# At least this many video batches in flight from 4 streams on (what 2 per stream gave
# 4): two (2 + 2 slots) cost 6-11 % more CPU per frame at 4 and 32 streams with a
# consumer that does nothing, which alone keeps about 7 of such a loader's 8 slots busy.
VIDEO_MIN_BATCHES_IN_FLIGHT = 8


def video_batches_in_flight(streams: int, batch: int) -> int:
    """Batches a video loader keeps in flight: two frames per stream in batches of
    ``batch``, at least :data:`VIDEO_MIN_BATCHES_IN_FLIGHT` (two per stream below 4).

    A batch per frame, as before, grew with streams squared: 66 slots of 32 frames at
    32 streams, 600 MiB that a consumer slower than decode fills.
    """
    two_frames_each = -(-2 * streams // max(1, batch))
    return min(2 * streams, max(VIDEO_MIN_BATCHES_IN_FLIGHT, two_frames_each))


def slot_count(in_flight: int, slot_bytes: int, budget_bytes: int | None) -> int:
    """How many slots a loader makes: one per item in flight, one for the batch the
    consumer holds and one being handed over, no more than ``budget_bytes`` holds
    (when both sizes are known), and never fewer than 2.

    Both loaders size their slot pools with it: the plan for a workload whose slot
    size it knows, the DataLoader once its first batch has shown the size.
    """
    count = in_flight + 2
    if slot_bytes and budget_bytes:
        count = min(count, budget_bytes // slot_bytes)
    return max(2, count)
