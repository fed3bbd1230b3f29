"""The batching side of a StreamLoader: slot pools, the mux thread, the prefetch queue.

The :class:`~edgeload.video._assembler.Assembler` places the readers' frames into batch
slots; its loop runs in the mux thread (``edgeload-video-mux``) and ships each batch
into a bounded :class:`~edgeload.pipeline.prefetch.Prefetcher`, which the consumer's
``next()`` reads.  With every stream ``latest`` the queue holds one batch (a newer one
replaces it).  Beside ``every`` streams, ``latest`` frames are copied into each batch
as it is handed to the consumer (:class:`~edgeload.video._hand_over.HandOver`), so
they never wait in the queue.  Either way :class:`~edgeload.video.demand.Demand`
lets the ``latest`` readers skip frames no batch will ship.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from ..errors import ClosedError, WorkerTimeout
from ..pipeline.lifecycle import POLL_INTERVAL_S
from ..pipeline.prefetch import Prefetcher
from ._assembler import MAX_OPEN, Assembler, BatchPools, Sealed
from ._hand_over import FreshFrame, HandOver
from ._reader import Wants
from .demand import Demand


def _give_back(sealed: Sealed) -> None:
    sealed.pool.release(sealed.slot)


class Mux:
    """A loader's assembler, its thread and the queue between it and the consumer.

    Args:
        slot_shape: the array shape of a slot with ``n`` places.
        batch: a fixed batch size, or None for one place per stream.
        deadline_s: ship a partial batch this long after its first frame.
        all_latest: every stream is ``latest`` (a one-batch queue that keeps the newest).
        slot_count: the plan's slot count (the queue is two shorter).
        memory_mode: the slots' memory mode. engine: the GPU engine behind it.
        active: the ids of the streams still delivering. tick: the watchdog.
    """

    def __init__(
        self,
        *,
        slot_shape: Callable[[int], tuple[int, ...]],
        batch: int | None,
        deadline_s: float,
        all_latest: bool,
        slot_count: int,
        memory_mode: str,
        engine: Any,
        active: Callable[[], list[int]],
        tick: Callable[[], None],
    ) -> None:
        self._tick, self._place_shape = tick, tuple(slot_shape(1)[1:])
        self.depth = 1 if all_latest else max(1, slot_count - 2)
        self.prefetch: Prefetcher[Sealed] = Prefetcher(
            max_items=self.depth,
            policy="latest" if all_latest else "block",
            on_drop=_give_back,
            name="StreamLoader prefetch",
        )
        prefetch = self.prefetch
        # Prefetched + the open ones + one being shipped + two the consumer may hold.
        count = self.depth + MAX_OPEN + 3
        self.pools = BatchPools(slot_shape, count=count, memory_mode=memory_mode, engine=engine)
        self.assembler = asm = Assembler(self.pools, batch=batch, deadline_s=deadline_s,
                                         active=active, hand_over=not all_latest)  # fmt: skip
        self.hand_over = None if all_latest else HandOver(asm.rules)
        # A latest frame ships if the consumer takes it: convert it just before then.
        self.demand = Demand(lambda: 0 if asm.rules.handing_over() else prefetch.stats().depth)
        self._thread = threading.Thread(target=self._run, name="edgeload-video-mux", daemon=True)

    def wants_for(self, stream_id: int, latest: bool) -> Wants | None:
        """What stream ``stream_id``'s reader asks before converting a frame (only
        ``latest`` streams skip any)."""
        if not latest:
            return None
        self.assembler.rules.latest.add(stream_id)  # one C call: no lock needed
        return self.demand.wants

    def fresh_for(self, stream_id: int, latest: bool) -> FreshFrame | None:
        """Where ``latest`` stream ``stream_id`` converts while ``every`` streams fill
        the batches (None: its frames go into the batches directly)."""
        if not latest or self.hand_over is None:
            return None
        return self.hand_over.register(stream_id, self._place_shape)

    def asked(self) -> None:
        """The consumer asks for the next batch."""
        self.demand.asked()
        self.assembler.asked()

    def handed(self, sealed: Sealed, known: Callable[[int], bool]) -> None:
        """``sealed`` goes to the consumer now: fill in the ``latest`` frames, and note
        that the consumer is back at its model.  ``known``: the streams in the loader."""
        if self.hand_over is not None:
            self.hand_over.fill(sealed, known)
        self.demand.taken()
        self.assembler.taken()

    def start(self) -> None:
        """Start the mux thread."""
        self._thread.start()

    def _run(self) -> None:
        """The mux thread: ship each batch the assembler seals, until none will come."""
        asm = self.assembler
        next_tick = 0.0
        while not asm.stopped:
            # The watchdog counts seconds of silence: once a poll interval is enough. Run
            # on every loop (2-3 a batch) it was a quarter of the mux thread's Python.
            now = time.monotonic()
            if now >= next_tick:
                self._tick()
                next_tick = now + POLL_INTERVAL_S
            sealed = asm.seal_next()
            if sealed is not None:
                self._ship(sealed)
            elif asm.finished:
                break
        asm.release_open()
        if not asm.stopped:
            self.prefetch.put_end()

    def _ship(self, sealed: Sealed) -> None:
        nbytes = sealed.pool.item_nbytes
        while not self.assembler.stopped:
            try:
                self.prefetch.put(sealed, nbytes=nbytes, timeout_s=POLL_INTERVAL_S)
                return
            except TimeoutError:
                continue
            except ClosedError:
                break
        _give_back(sealed)

    def next_sealed(
        self, timeout_s: float, *, check: Callable[[], None], phases: Callable[[], Any]
    ) -> Any:
        """The next shipped batch, ``prefetch.END`` when every stream is done, or None once closed.

        ``check`` runs each poll (it raises a failed stream's error); ``phases`` names
        each stream's phase in the timeout error.

        Raises:
            WorkerTimeout: no batch within ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            check()
            try:
                return self.prefetch.get(timeout_s=POLL_INTERVAL_S)
            except ClosedError:
                return None
            except TimeoutError:
                pass  # nothing else in the handler: a Ctrl-C raised in it prints two tracebacks
            if time.monotonic() > deadline:
                raise WorkerTimeout(
                    f"StreamLoader: no batch within timeout_s={timeout_s} s; stream "
                    f"states {phases()}; see stats() for errors, or raise timeout_s=",
                    worker="edgeload-video-mux",
                )

    def stop(self) -> None:
        """Make the mux loop and the readers' waiting claims return within a poll."""
        self.assembler.stop()

    def threads(self) -> list[threading.Thread]:
        """The mux thread, once started (to join)."""
        return [self._thread] if self._thread.ident else []

    def release(self) -> None:
        """After the threads are joined: give back queued batches, close queue and pools."""
        for sealed in self.prefetch.drain():
            _give_back(sealed)
        self.prefetch.close()
        self.pools.close()
