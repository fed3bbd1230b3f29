"""Where a shared batch's rows go: a slot the user gave back, or fresh memory.

A worker that needs memory for the next shared batch (see :mod:`._claims`) waits for
a slot while the user holds the others: in a plain ``for batch in loader`` the user's
last batch comes back when the loop variable is rebound.  A user who keeps every
batch would make it wait for ever, so once every slot has been in the user's hands
for :data:`USER_KEEPS_AFTER_S` the batch gets fresh memory (which goes with it), and
from then on at once whenever the user holds every slot.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import ClosedError
from ._slots import LoaderSlots

# A plain loop holds every slot only between a batch's lease and the loop variable's
# rebinding (microseconds; a few switch intervals on a loaded board).
USER_KEEPS_AFTER_S = 0.5
_SLOT_POLL_S = 0.05


def wait_for_slot(slots: LoaderSlots, should_stop: Callable[[], bool]) -> Any:
    """A free slot for a shared batch, or None (fresh memory) when the user keeps every
    slot.  Called by a worker.

    Raises:
        ClosedError: ``should_stop()`` turned true, or the slots were closed.
    """
    pool = slots.pool
    waited = 0.0
    while True:
        if should_stop() or pool is None or pool.closed:
            raise ClosedError("edgeload-loader-slots: the epoch stopped")
        s = pool.stats()
        all_held = s.leased >= s.count
        if all_held and slots.user_keeps:
            return None
        try:
            slot = pool.acquire(timeout_s=_SLOT_POLL_S)
        except TimeoutError:
            waited = waited + _SLOT_POLL_S if all_held else 0.0
            if waited >= USER_KEEPS_AFTER_S:
                slots.user_keeps = True
            continue
        slots.touched.add(slot.index)
        return slot
