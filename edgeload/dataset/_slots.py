"""The loader's batch slots: made once the first batch shows the samples' layout.

Slots are used only with the default collate and fixed-size samples.  The first
batches are collated by ``default_collate``; the worker that made the first one also
sends a :class:`~edgeload.dataset._collate.SlotMap`, and from then on each task is given a
slot (when one is free) to write its samples into: with the task for a process worker,
when it starts writing for a thread worker (:class:`SlotClaim`).  A slot the user still holds a
batch of is never handed out again (the pool's lease rule); if none is free the task
runs without one, so a user who keeps every batch slows nothing down and loses nothing.
"""

from __future__ import annotations

import logging
from typing import Any

from ..errors import PlatformError
from . import _collate
from ._device import pin_batch
from ._worker import Result, SlotClaim

_log = logging.getLogger("edgeload")


class LoaderSlots:
    """Owns the :class:`~edgeload.pipeline.slots.SlotPool` of one loader (or none)."""

    def __init__(
        self,
        *,
        enabled: bool,
        in_flight: int,
        budget_bytes: int | None,
        shared: bool,
        mode: str,
        engine: Any = None,
    ) -> None:
        self.enabled = enabled
        self._in_flight = in_flight
        self._budget_bytes = budget_bytes
        self._count = 2
        self._shared = shared
        self._mode = mode
        self._engine = engine
        self._pool: Any = None
        self.layout: _collate.SlotMap | None = None

    def offer_layout(self, layout: _collate.SlotMap) -> None:
        """Create the pool for ``layout`` (the first offer wins)."""
        if not self.enabled or self.layout is not None:
            return
        from ..pipeline.slots import SlotPool
        from ..platform.plan import slot_count

        # `for batch in loader` still holds the previous batch while the next is leased.
        self._count = slot_count(self._in_flight, layout.nbytes, self._budget_bytes)
        # A fixed count (no max_bytes growth): when the user keeps batches, a task
        # without a free slot gets fresh memory, which goes when the batch goes.
        max_bytes = None
        try:
            self._pool = self._make_pool(SlotPool, layout, max_bytes, self._mode)
        except PlatformError as exc:
            _log.warning("edgeload: loader slots in host memory: %s", exc)
            self._mode = "host"
            self._pool = self._make_pool(SlotPool, layout, max_bytes, "host")
        self.layout = layout

    def _make_pool(self, cls: Any, layout: _collate.SlotMap, max_bytes: Any, mode: str) -> Any:
        return cls(
            (layout.nbytes,),
            "uint8",
            count=self._count,
            max_bytes=max_bytes,
            mode=mode,
            shared=self._shared,
            name="edgeload-loader-slots",
            engine=self._engine if mode != "host" else None,
        )

    @property
    def page_locked(self) -> bool:
        """Whether slot memory is already page-locked (a GPU mode): no pinning needed."""
        return self._pool is not None and self._mode != "host"

    def _layout_for(self, index: Any) -> _collate.SlotMap | None:
        """The slots' layout if a task of ``index`` fits a slot (a full batch), else None."""
        layout = self.layout
        if self._pool is None or layout is None or not isinstance(index, list):
            return None
        return layout if len(index) == layout.batch_size else None

    def acquire(self, index: Any) -> tuple[Any, _collate.SlotMap | None]:
        """A free slot for a task of ``index`` and its layout, or ``(None, None)``."""
        layout = self._layout_for(index)
        if layout is None:
            return None, None
        try:
            return self._pool.acquire(timeout_s=0), layout
        except TimeoutError:
            return None, None

    def claim(self, index: Any) -> tuple[SlotClaim | None, _collate.SlotMap | None]:
        """For a thread worker's task of ``index``: a claim on a slot that the worker
        takes when it starts writing, and the layout; or ``(None, None)``."""
        layout = self._layout_for(index)
        return (None, None) if layout is None else (SlotClaim(self._pool), layout)

    @staticmethod
    def settle(held: Any) -> Any:
        """The slot behind ``held`` (a slot, None, or a :class:`SlotClaim`), now the
        caller's to finish or release; a claim not yet taken can no longer take one."""
        return held.settle() if isinstance(held, SlotClaim) else held

    def release(self, slot: Any) -> None:
        """Give back a slot whose task produced nothing in it."""
        if slot is not None and self._pool is not None:
            self._pool.release(slot)

    def finish(self, slot: Any, result: Result, *, pin: bool = False) -> Any:
        """The batch of ``result``: views of its slot, or the data it carried; with
        ``pin``, in page-locked memory (a GPU mode's slots already are)."""
        if slot is None or not result.rows or self.layout is None:
            self.release(slot)
            batch = result.data
        else:
            view = self._pool.lease(slot)
            batch = _collate.read_batch(self.layout, view, result.rows)
            if self.page_locked:
                return batch
        return pin_batch(batch, self._engine) if pin else batch

    def stats(self) -> dict[str, Any]:
        """Slot counters (empty before the pool exists)."""
        if self._pool is None:
            return {}
        s = self._pool.stats()
        return {
            "slots": s.count,
            "slot_bytes": self.layout.nbytes if self.layout else 0,
            "slots_held_by_user": s.leased,
            "slots_in_use": s.acquired,
            "slot_copies": s.copies,
            "slot_gpu_waits": s.gpu_waits,
        }

    def close(self) -> None:
        """Free the pool (batches the user holds keep their memory mapped)."""
        if self._pool is not None:
            self._pool.close()
        self._pool = None
        self.layout = None
