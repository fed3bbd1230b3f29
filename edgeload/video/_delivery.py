"""From a stream's decoded frames to the consumer's :class:`Batch`: the per-stream glue.

A :class:`StreamEntry` is one stream inside a loader: its source, its frame writer,
its reader thread and what the consumer has received from it.  ``make_sink`` joins a
reader to the assembler; ``build_batch`` turns a shipped slot into a :class:`Batch`
and counts it in the loader's :class:`~edgeload.video.stats.Telemetry`;
``raise_failures`` reports the streams that ended with an error.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from .._deps import require_torch
from ..errors import SourceError
from ._frame_loop import Sink
from .assembler import Assembler, Sealed
from .batch import Batch, FrameMeta
from .reader import StreamReader
from .resize import FrameWriter
from .source import FrameInfo, VideoSource
from .stats import Telemetry

_log = logging.getLogger("edgeload")


class StreamEntry:
    """One stream of a loader and what its consumer has received from it."""

    def __init__(self, sid: int, source: VideoSource, writer: FrameWriter) -> None:
        self.sid, self.source, self.writer = sid, source, writer
        self.reader: StreamReader | None = None
        self.target: Any = None
        self.last_seq = -1  # the last seq the consumer received (resume starts after it)
        self.delivered = 0
        self.drops = 0
        self.error_reported = False


def make_sink(asm: Assembler, stream: StreamEntry, running: Callable[[], bool]) -> Sink:
    """The reader's sink: claim a place, resize the frame into it, commit it."""
    writer, latest = stream.writer, stream.source.policy == "latest"

    def sink(frame: np.ndarray, info: FrameInfo) -> bool:
        claim = asm.claim(stream.sid, latest=latest)
        if claim is None:
            return running()
        batch, place = claim
        try:
            writer.write(frame, batch.slot.array[place])
        except BaseException:
            asm.commit(batch, place, None)
            raise
        asm.commit(batch, place, info)
        return True

    return sink


def raise_failures(streams: Iterable[StreamEntry], *, raise_: bool) -> None:
    """Report each stream that ended with an error once: raise SourceError, or log it."""
    for stream in streams:
        conn = None if stream.reader is None else stream.reader.connection
        if conn is None or not conn.phase.done or conn.last_error is None:
            continue
        if stream.error_reported:
            continue
        stream.error_reported = True
        message = f"stream {stream.sid} ({stream.source.name}): {conn.last_error}"
        if raise_:
            raise SourceError(message, source=stream.source.uri)
        _log.warning("edgeload: %s", message)


def check_slot_mode(mode: str, engine: Any) -> None:
    """Raise unless ``mode`` (an explicit memory mode) works here.

    Raises:
        ProfileError: not a memory mode. PlatformError: the mode needs what this
            machine lacks; the message names the mode that would work.
    """
    from ..cuda.status import MEMORY_MODES, check_memory_mode

    if engine is None or mode not in MEMORY_MODES:
        check_memory_mode(mode)
    else:
        engine.check_memory_mode(mode)


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
    streams: Mapping[int, StreamEntry],
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
    metas: list[FrameMeta | None] = []
    ages: list[float] = []
    for place in range(len(sealed.valid)):
        if not sealed.valid[place]:
            metas.append(None)
            continue
        sid, seq = int(sealed.stream_id[place]), int(sealed.seq[place])
        stream = streams.get(sid)
        gap = 0
        if stream is not None:
            gap = seq - stream.last_seq - 1 if seq > stream.last_seq else 0
            stream.last_seq, stream.drops = seq, stream.drops + gap
            stream.delivered += 1
        captured = float(sealed.captured_at[place])
        age = (now - captured) * 1000.0
        ages.append(age)
        metas.append(FrameMeta(sid, seq, float(sealed.pts_ms[place]), captured, age, gap))
    telemetry.delivered(ages, now)
    return Batch(frames, torch.from_numpy(sealed.valid), tuple(metas))
