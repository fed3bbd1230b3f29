"""From a stream's decoded frames to the consumer's :class:`Batch`: the per-stream glue.

``reader_for`` makes a stream's reader, with the sink (``make_sink``) that joins it
to the assembler.  On the consumer's side, :class:`Delivery` waits for the next
shipped slot, reports the streams that ended with an error (``raise_failures``) and
turns the slot into a :class:`Batch` (``build_batch``), counted in the loader's
:class:`~edgeload.video._stats.Telemetry`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from .._deps import require_torch
from ..errors import SourceError
from ..pipeline.prefetch import END
from ._assembler import Assembler, Sealed
from ._mux import FreshFrame, Mux
from ._reader import Sink, StreamReader, Wants
from ._stats import Telemetry
from ._stream_table import StreamEntry, StreamTable
from .batch import Batch, FrameMeta
from .source import FrameInfo

_log = logging.getLogger("edgeload")


def make_sink(
    asm: Assembler, stream: StreamEntry, running: Callable[[], bool], fresh: FreshFrame | None
) -> Sink:
    """The reader's sink: claim a place, resize the frame into it, commit it
    (:meth:`~edgeload.video._assembler.Assembler.deliver`); or, for a ``latest`` stream
    beside active ``every`` ones, resize it into ``fresh``."""
    writer, latest = stream.writer, stream.source.policy == "latest"
    # A partial of the assembler's method: no Python frame of its own per frame.
    deliver = functools.partial(asm.deliver, stream.sid, latest, writer, running)
    if fresh is None:
        return deliver

    def sink(frame: np.ndarray, seq: int, pts_ms: float, captured_at: float) -> bool:
        if asm.rules.handing_over():
            fresh.write(frame, FrameInfo(seq, pts_ms, captured_at), writer)
            return True
        return deliver(frame, seq, pts_ms, captured_at)

    return sink


def reader_for(
    stream: StreamEntry,
    gate: list[threading.Event],
    *,
    asm: Assembler,
    running: Callable[[], bool],
    ffmpeg_threads: int,
    wants_for: Callable[[int, bool], Wants | None],
    fresh_for: Callable[[int, bool], FreshFrame | None],
) -> StreamReader:
    """The reader of ``stream``, writing into ``asm``'s batches; it resumes after the last
    frame the consumer received, and only a network source waits for ``gate``."""
    src = stream.source
    latest = src.policy == "latest"
    return StreamReader(
        src, stream.target,
        stream_id=stream.sid, sink=make_sink(asm, stream, running, fresh_for(stream.sid, latest)),
        ffmpeg_threads=ffmpeg_threads, start_frame=stream.last_seq + 1,
        gate=gate if src.network else None,
        wants=wants_for(stream.sid, latest),
    )  # fmt: skip


class Delivery:
    """The consumer's side of a loader: the next batch, failed streams, the telemetry.

    Args:
        table: the loader's streams. mux: where shipped batches come from.
        copier: brings batches to the device (None: they stay on the CPU).
        raise_errors: a failed stream raises SourceError (else it is logged).
        timeout_s: most seconds to wait for a batch.
    """

    def __init__(
        self, table: StreamTable, mux: Mux, *, copier: Any, raise_errors: bool, timeout_s: float
    ) -> None:
        self._table, self._mux, self._copier = table, mux, copier
        self._raise_errors, self._timeout_s = raise_errors, timeout_s
        self.telemetry = Telemetry()

    def next_batch(self) -> Batch:
        """The next batch for the consumer.

        Raises:
            StopIteration: every stream is done, or the loader closed.
            SourceError: a stream failed and ``raise_errors`` is set.
            WorkerTimeout: no batch within ``timeout_s``.
        """
        self._mux.asked()
        item = self._mux.next_sealed(self._timeout_s, check=self.raise_failures,
                                     phases=self._table.phases)  # fmt: skip
        if item is None:
            raise StopIteration
        if item is END:
            self.raise_failures()
            raise StopIteration
        try:
            self._mux.handed(item, lambda sid: self._table.get(sid) is not None)
            # One copy of the table a batch (its dict's own get per place): not a
            # locked lookup per frame.
            return build_batch(item, self._table.snapshot().get, self.telemetry, self._copier)
        except BaseException:
            # Ctrl-C (or an error) before the slot was leased: it is neither leased nor
            # queued, so it goes back to its pool here; lost, each would cost a slot.
            # Once leased, the batch's views give it back and release() says so.
            with contextlib.suppress(ValueError):
                item.pool.release(item.slot)
            raise

    def raise_failures(self) -> None:
        """Report each stream that ended with an error, once."""
        raise_failures(self._table.entries(), raise_=self._raise_errors)


def raise_failures(streams: Iterable[StreamEntry], *, raise_: bool) -> None:
    """Report each stream that ended with an error once: raise SourceError, or log it."""
    for stream in streams:
        conn = None if stream.reader is None else stream.reader.connection
        if conn is None or not conn.phase.done or conn.last_error is None:
            continue
        if stream.error_reported:
            continue
        stream.error_reported = True
        message = f"stream {stream.sid} ({stream.source.name}): {conn.last_error.message}"
        if raise_:
            raise SourceError(message, source=stream.source.uri) from conn.last_error.exc
        _log.warning("edgeload: %s", message)


def device_copier(device: Any, engine: Any) -> Any:
    """The copier that brings batches to ``device`` (None keeps them on the CPU).

    Made in the loader's constructor, so a device that does not exist is an error
    before any thread starts.

    Raises:
        PlatformError: no usable CUDA, or no such device (the message lists those there are).
    """
    if device is None or str(device) == "cpu":
        return None
    from ..cuda.transfer import DeviceCopier

    return DeviceCopier(device=device, engine=engine)


def build_batch(
    sealed: Sealed,
    streams: Callable[[int], StreamEntry | None],
    telemetry: Telemetry,
    copier: Any,
) -> Batch:
    """Lease the shipped slot to the consumer as a :class:`Batch`.

    Without a copier the frames are a view of the slot (no copy). With one, mapped and
    managed slots are viewed by the GPU in place and pinned or host slots are copied on
    the copier's stream; either way the slot stays leased until the GPU work that
    reads it has completed, and the consumer's stream waits for the copy.
    """
    torch = require_torch()
    if copier is None:
        frames = torch.from_numpy(sealed.pool.lease(sealed.slot))
    else:
        # Leased with the copier's stream current: when the view goes, the pool fences
        # the slot on that stream (and on this thread's), so it is not written again
        # before the copy has read it.
        with copier.engine.use_stream(copier.stream):
            view = sealed.pool.lease(sealed.slot)
        frames = copier.to_device(view, hold=False).tensor()
        del view
    now = time.monotonic()
    ages: list[float] = []
    # One ``tolist`` per field, not a numpy scalar read per place and field.
    valid: list[bool] = sealed.valid.tolist()
    metas: list[FrameMeta | None] = [None] * len(valid)
    sids: list[int] = sealed.stream_id.tolist()
    seqs: list[int] = sealed.seq.tolist()
    pts: list[float] = sealed.pts_ms.tolist()
    captured_at: list[float] = sealed.captured_at.tolist()
    for place, ok in enumerate(valid):
        if not ok:
            continue
        sid, seq = sids[place], seqs[place]
        stream = streams(sid)
        gap = 0
        if stream is not None:
            gap = seq - stream.last_seq - 1 if seq > stream.last_seq else 0
            stream.last_seq, stream.drops = seq, stream.drops + gap
            stream.delivered += 1
        captured = captured_at[place]
        age = (now - captured) * 1000.0
        ages.append(age)
        metas[place] = FrameMeta(sid, seq, pts[place], captured, age, gap)
    telemetry.delivered(ages, now)
    return Batch(frames, torch.from_numpy(sealed.valid), tuple(metas))
