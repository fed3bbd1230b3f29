"""The slot pools a loader's batches open on: one per batch size, made on first use.

With ``batch=None`` the batch follows the number of streams, so after ``add()`` or
``remove()`` the next batch opens on a pool of the new shape.  The old pools stay
until the loader closes, so batches the user still holds stay valid.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

import numpy as np

from ..errors import ClosedError
from ..pipeline.slots import Slot, SlotPool
from ._placement import OpenBatch


class BatchPools:
    """A loader's batch slot pools, by batch size.

    Args:
        slot_shape: the array shape of a slot with ``n`` places.
        count: slots per pool.
        memory_mode: the slots' memory mode. engine: the GPU engine behind it.
    """

    def __init__(
        self,
        slot_shape: Callable[[int], tuple[int, ...]],
        *,
        count: int,
        memory_mode: str,
        engine: Any,
    ) -> None:
        self._slot_shape, self._count = slot_shape, count
        self._mode, self._engine = memory_mode, engine
        self._lock = threading.Lock()
        self._pools: dict[int, SlotPool] = {}
        self._closed = False

    def free_slot(self, places: int) -> tuple[SlotPool, Slot] | None:
        """A free slot for a batch of ``places`` frames, without waiting; None if none is.

        Raises:
            ClosedError: the loader closed (a reader that outlived it makes no new memory).
        """
        with self._lock:
            pool = self._pools.get(places)
            if pool is None:
                if self._closed:
                    raise ClosedError("StreamLoader: closed; no new batch slots")
                pool = self._pools[places] = SlotPool(
                    self._slot_shape(places), np.uint8, count=self._count,
                    mode=self._mode,  # type: ignore[arg-type]
                    name="StreamLoader slots", engine=self._engine,
                )  # fmt: skip
        try:
            return pool, pool.acquire(timeout_s=0)
        except (TimeoutError, ClosedError):
            return None

    def open_batch(self, places: int) -> OpenBatch | None:
        """A batch of ``places`` opened now on a free slot; None if none is free."""
        free = self.free_slot(places)
        return None if free is None else OpenBatch(*free, places, opened_at=time.monotonic())

    def all(self) -> list[SlotPool]:
        """Every pool made so far."""
        with self._lock:
            return list(self._pools.values())

    def close(self) -> None:
        """Close every pool (after the threads that use them are joined)."""
        with self._lock:
            self._closed = True
            pools = list(self._pools.values())
        for pool in pools:
            pool.close()
