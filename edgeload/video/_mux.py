"""The batching side of a StreamLoader: slot pools, the mux thread, the prefetch queue,
and the consumer's cadence that times the ``latest`` streams.

The :class:`~edgeload.video._assembler.Assembler` places the readers' frames into batch
slots; its loop runs in the mux thread (``edgeload-video-mux``) and ships each batch
into a bounded :class:`~edgeload.pipeline.prefetch.Prefetcher`, which the consumer's
``next()`` reads.  With every stream ``latest`` the queue holds one batch (a newer one
replaces it).  Beside ``every`` streams, ``latest`` frames are copied into each batch
as it is handed to the consumer (:class:`HandOver`), so they never wait in the queue.
Either way :class:`Demand` lets the ``latest`` readers skip frames no batch will ship.

**When the consumer will next take a batch** (:class:`Demand`), so ``latest`` streams
convert only what ships.  A live camera decodes every frame (H.264 needs each one for
the next), but turning a decoded frame into pixels (``retrieve``: colour conversion
and copy) and resizing it into a batch place is wasted on a frame a newer one replaces
before the batch ships.  With a consumer slower than the cameras that is most frames:
at 30 fps and 80 ms per batch, five of every seven.

:class:`Demand` watches the consumer's cadence: when it last took a batch, and
how long it usually takes before asking for the next.  A reader asks
:meth:`Demand.wants` after each grab; the answer is yes when the consumer is
waiting, or when no batch is waiting for it and its next request is due within
about one frame interval (so the frame converted now, or its successor, is the one
the consumer gets), or when the consumer is late for a batch that is waiting (so
that batch is replaced by a fresher one rather than growing old).  Otherwise the
frame is dropped unconverted and counted.

The fields are plain floats and bools, written by the consumer thread and read by
readers; a stale read only moves one frame's decision, so no lock is taken.

Beside ``every`` streams a ``latest`` frame is copied into the batch as the consumer
takes it (:class:`HandOver`), so the same cadence times its conversion, and nothing
waits for the consumer there (``pending`` is 0).

**The hand-over** (:class:`HandOver`): ``latest`` frames beside ``every`` streams are
filled in as the batch is handed over.  In a loader that also has ``every`` streams, a
batch is sealed once the ``every`` streams have filled it, and then waits in the
prefetch queue (up to ``slot_count - 2`` batches, so their readers never idle).  A
``latest`` frame placed when the batch is sealed waits there with it: with a 150 ms
model it was 1.07 s old at the median (``docs/performance.md``).  So, while an ``every`` stream is active, a
``latest`` stream's reader converts into a :class:`FreshFrame` of its own, timed by the
consumer's cadence (:class:`Demand`), and the consumer's thread copies the newest one
into the batch as it hands the batch over (:meth:`HandOver.fill`: one copy of a place,
about 0.3 ms at 640x640).  The ``every`` streams leave those places empty
(:class:`~edgeload.video._assembler.Placement`).  Once no ``every`` stream is active,
``latest`` frames go into the batches directly, as in an all-``latest`` loader.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ClosedError, WorkerTimeout
from ..pipeline._lifecycle import POLL_INTERVAL_S
from ..pipeline.prefetch import Prefetcher
from ._assembler import MAX_OPEN, Assembler, BatchPools, Placement, Sealed
from ._reader import Wants
from ._resize import FrameWriter, Geometry
from .source import FrameInfo

if TYPE_CHECKING:  # a runtime import would load the CUDA modules early
    from ..cuda.engine import Engine


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
        all_down: whether no active stream can deliver now (live sources down); the
            consumer then gets a batch with no frame at each deadline (:meth:`_idle`).
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
        engine: Engine | None,
        active: Callable[[], list[int]],
        tick: Callable[[], None],
        all_down: Callable[[], bool] = lambda: False,
    ) -> None:
        self._tick, self._place_shape = tick, tuple(slot_shape(1)[1:])
        self._all_down, self._deadline_s = all_down, deadline_s
        self._shipped_at = 0.0  # when the last batch went into the queue
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
            if sealed is None and self._idle(now):
                sealed = asm.seal_empty()
            if sealed is not None:
                self._ship(sealed)
            elif asm.finished:
                break
        asm.release_open()
        if not asm.stopped:
            self.prefetch.put_end()

    def _idle(self, now: float) -> bool:
        """Whether the consumer has waited a deadline for a batch that cannot come: it
        gets one with no frame, so a deployed loop keeps its cadence while every camera
        is down (and ``WorkerTimeout`` means the mux itself is stuck)."""
        demand = self.demand
        if not demand.waiting or self.prefetch.stats().depth:
            return False
        since = max(demand.asked_at or 0.0, self._shipped_at)
        return now - since >= self._deadline_s and self._all_down()

    def _ship(self, sealed: Sealed) -> None:
        nbytes = sealed.pool.item_nbytes
        while not self.assembler.stopped:
            try:
                self.prefetch.put(sealed, nbytes=nbytes, timeout_s=POLL_INTERVAL_S)
                self._shipped_at = time.monotonic()
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


class FreshFrame:
    """One ``latest`` stream's newest converted frame, until it is handed over once.

    Three buffers: the newest, the one the consumer may be copying, and the one the
    reader writes next, so neither side waits for the other's copy.

    Args:
        shape: a batch place's array shape.
    """

    def __init__(self, shape: tuple[int, ...]) -> None:
        self._shape = shape
        self._buffers: list[np.ndarray] = []  # made at the first frame
        self._lock = threading.Lock()
        self._newest: int | None = None
        self._reading: int | None = None
        self._info: FrameInfo | None = None  # None: nothing new since the last hand-over
        self._geometry: list[Geometry | None] = [None] * 3  # per buffer: its picture's place
        self.handed = 0  # hand-overs so far: with a fixed batch the fewest go first

    def write(self, frame: np.ndarray, info: FrameInfo, writer: FrameWriter) -> None:
        """The reader's side: convert ``frame`` into a free buffer, then make it the newest."""
        with self._lock:
            if not self._buffers:
                self._buffers = [np.empty(self._shape, np.uint8) for _ in range(3)]
            index = next(i for i in range(3) if i not in (self._newest, self._reading))
        geometry = writer.write(frame, self._buffers[index])
        with self._lock:
            self._newest, self._info = index, info
            self._geometry[index] = geometry

    def hand_into(self, place: np.ndarray) -> tuple[FrameInfo, Geometry | None] | None:
        """The consumer's side: copy the newest frame into ``place`` and return its info
        and geometry; None (``place`` untouched) when no frame came since the last
        hand-over."""
        with self._lock:
            info, index = self._info, self._newest
            if info is None or index is None:
                return None
            self._info, self._reading = None, index
            geometry = self._geometry[index]
        try:
            np.copyto(place, self._buffers[index])
        finally:
            with self._lock:
                self._reading = None
        self.handed += 1
        return info, geometry


class HandOver:
    """A mixed loader's ``latest`` streams and their fresh frames.

    Args:
        rules: the assembler's placement rules (which places the ``every`` streams
            leave free).
    """

    def __init__(self, rules: Placement) -> None:
        self._rules = rules
        self._fresh: dict[int, FreshFrame] = {}
        self._lock = threading.Lock()  # readers register while the consumer fills

    def register(self, stream_id: int, shape: tuple[int, ...]) -> FreshFrame:
        """The fresh frame of ``latest`` stream ``stream_id`` (made on its first reader)."""
        with self._lock:
            fresh = self._fresh.get(stream_id)
            if fresh is None:
                fresh = self._fresh[stream_id] = FreshFrame(shape)
            return fresh

    def fill(self, sealed: Sealed, known: Callable[[int], bool]) -> None:
        """Copy each ``latest`` stream's newest frame into a free place of ``sealed``,
        the batch the consumer takes now (in its thread): its own place, or with a
        fixed batch size the next free one, the streams handed over least first.
        ``known`` says whether a stream is still in the loader (removed ones go)."""
        if not self._fresh:
            return  # no ``latest`` stream has registered: nothing to fill, every batch
        with self._lock:
            for sid in [s for s in self._fresh if not known(s)]:
                del self._fresh[sid]
            streams = sorted(self._fresh.items(), key=lambda item: item[1].handed)
        free = [int(p) for p in np.flatnonzero(sealed.stream_id < 0)]
        for sid, fresh in streams:
            if self._rules.fixed is None:
                place = self._rules.places.get(sid, -1)
                if place not in free:
                    continue
            elif free:
                place = free[0]
            else:
                break
            handed = fresh.hand_into(sealed.slot.array[place])
            if handed is None:
                continue
            info, sealed.geometry[place] = handed
            free.remove(place)
            sealed.valid[place] = True
            sealed.stream_id[place] = sid
            sealed.seq[place] = info.seq
            sealed.pts_ms[place] = info.pts_ms
            sealed.captured_at[place] = info.captured_at


_SMOOTHING = 0.3  # weight of the newest consumer interval in the running estimate
# A latest frame is converted this long before the consumer is due, besides twice the
# reader's own recent delivery time (retrieve, convert, ship: larger frames and busier
# boards take longer): the batch is complete when the consumer asks, and no older than
# that needs. At most half a frame interval: beyond that the frame before would do.
_MARGIN_S = 0.003


class Demand:
    """The consumer's cadence, as the loader's ``__next__`` reports it.

    Args:
        pending: returns how many shipped batches are waiting for the consumer.
    """

    def __init__(self, pending: Callable[[], int]) -> None:
        self._pending = pending
        self.waiting = False
        self.asked_at: float | None = None
        self.taken_at: float | None = None
        self.consumer_s: float | None = None
        """Running estimate of the consumer's time between batches (its model)."""

    def asked(self, now: float | None = None) -> None:
        """The consumer asked for the next batch."""
        now = time.monotonic() if now is None else now
        if self.taken_at is not None:
            took = now - self.taken_at
            prev = self.consumer_s
            self.consumer_s = took if prev is None else prev + _SMOOTHING * (took - prev)
        self.asked_at = now
        self.waiting = True

    def taken(self, now: float | None = None) -> None:
        """The consumer got a batch and went back to its model."""
        self.waiting = False
        self.taken_at = time.monotonic() if now is None else now

    def due_at(self) -> float | None:
        """When the consumer is expected to ask next; None before it has a cadence."""
        if self.taken_at is None or self.consumer_s is None:
            return None
        return self.taken_at + self.consumer_s

    def wants(self, now: float, interval_s: float, delivery_s: float = 0.0) -> bool:
        """Whether a frame grabbed at ``now`` should be converted for the next batch.

        Args:
            now: when the frame was grabbed (``time.monotonic()``).
            interval_s: the stream's frame interval: its next frame comes about then.
            delivery_s: the reader's recent time from grab to a frame in the batch.
        """
        if self.waiting:
            return True
        due = self.due_at()
        if due is None:
            return True
        if self._pending() > 0:
            # A batch waits for the consumer: a frame now could only replace it, which
            # is worth it only once the consumer is late and that batch grows stale.
            return now >= due
        margin = min(_MARGIN_S + 2 * delivery_s, interval_s / 2)
        return now >= due - interval_s - margin
