"""N video sources multiplexed into fixed-size batches: :class:`StreamLoader`.

Each source has a reader thread (``edgeload-video-N``) that decodes into its own
buffer and writes the resized frame straight into its place in a batch slot; the mux
thread (``edgeload-video-mux``) ships batches to a bounded prefetcher when full or at
the deadline; the consumer gets a :class:`Batch` whose ``frames`` tensor is a view of
the slot (zero copies), and the slot is reused only once that tensor is gone.

**What a loader is made of**, built once in its constructor from the checked settings
and the plan (:mod:`~edgeload.video._settings`): each stream's target
(:func:`target_for`), the batching side (:class:`~edgeload.video._mux.Mux`), the
readers' factory (:func:`reader_for`) and the consumer's :class:`Delivery`.  The loader keeps the
lifecycle (unopened, open, closed), starts the readers (local sources first) and the
mux thread, and stops them in the reverse order.

**The streams of one loader** (:class:`StreamTable`), by id: added and removed while
the readers run.  The consumer's thread adds and removes entries; the mux thread and
the readers' sinks read them.  One lock guards the table itself; an entry's counters
are written by one thread each (the consumer's: ``last_seq``, ``delivered``,
``drops``).

**From a stream's decoded frames to the consumer's** :class:`Batch`: the per-stream
glue.  :func:`reader_for` makes a stream's reader, with the sink (:func:`make_sink`)
that joins it to the assembler.  On the consumer's side, :class:`Delivery` waits for
the next shipped slot, reports the streams that ended with an error
(:func:`raise_failures`) and turns the slot into a :class:`Batch`
(:func:`build_batch`), counted in the loader's
:class:`~edgeload.video._stats.Telemetry`.

**What a loader saves for resume**, and its restore.  ``state_dict()`` is each file
stream's next frame index (after the last frame the consumer received; prefetched
batches are not state), as plain ints and strings.  A fresh loader with the same file
sources continues there: its readers seek, or read and discard where seeking is
inexact.  Live streams have nothing to resume.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
import time
import weakref
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Callable, Literal, Union

import numpy as np

from .. import _args
from .._compat import zip_strict
from .._deps import require_cv2, require_torch
from ..checkpoint import KEY_LOADER, KEY_VERSION, check_version
from ..errors import ArgumentError, ClosedError, StateError, redact
from ..pipeline._failure import user_error
from ..pipeline._lifecycle import Lifecycle, join_threads, weak_call
from ..pipeline.prefetch import END
from ..platform.profile import Profile
from ..vocabulary import AUTO, MEMORY_MODES
from ._assembler import Assembler, Sealed
from ._capture import Target, build_target
from ._gstreamer import Output, board_elements, hardware_decoder
from ._mux import FreshFrame, Mux
from ._reader import _TRUNCATION_SLACK_FRAMES, Sink, StreamReader, Wants, seek, watchdog
from ._resize import Color, FrameWriter, Geometry, Layout, ResizeMode
from ._settings import (
    StreamSettings,
    check_sources,
    memory_mode_for,
    model_size,
    output_converter,
    plan_streams,
    with_output,
)
from ._stats import Telemetry, loader_stats
from .batch import Batch, FrameMeta
from .source import FrameInfo, Policy, SourceState, VideoSource, as_source

if TYPE_CHECKING:  # a runtime import would load the CUDA modules early
    from ..cuda.engine import Engine

__all__ = ["SourceLike", "StreamLoader", "target_for"]

# evaluated at import: typing.Union and a string for os.PathLike keep it valid on Python 3.8
SourceLike = Union[VideoSource, str, int, "os.PathLike[str]"]

_JOIN_TIMEOUT_S = 10.0
_log = logging.getLogger("edgeload")


class StreamLoader:
    """Batches from several cameras, streams or files, for a model on an edge device.

    Args:
        sources: paths, URLs, camera indices, pipelines or :class:`VideoSource`.
        size: output ``(width, height)`` of every frame, whatever the input size; or
            one number, a detector's image size: the long side of a letterboxed
            picture, the shape fixed now by the rule of
            :func:`~edgeload.video._settings.model_size` (with ``stride``).
        batch: places per batch, ``every`` frames taking the first free one (each file
            runs at its own pace); None: one place per stream in every batch, so
            ``every`` streams advance, and files end, together.
        policy: ``latest`` or ``every`` for every source; None: each source's default
            (``latest`` for live inputs, ``every`` for files).
        deadline_ms: ship a partial batch this long after its first frame; None:
            100 ms with a live source, else 2000 ms.
        layout: ``NHWC`` or ``NCHW``. color: ``bgr`` or ``rgb``.
        resize: ``stretch`` or ``letterbox``.
        memory_mode: slot memory (``auto``: ``host``, or the plan's with a ``device``).
        device: a CUDA device to move batches to; None keeps them on the CPU (zero-copy).
        engine: the GPU engine behind ``device`` and the GPU memory modes (default:
            CUDA through torch; ``edgeload.cuda.host_engine.HostEngine`` runs them on
            the CPU, for tests).
        on_error: ``continue`` (a failed stream ends; its error is in ``stats()``) or
            ``raise`` (the next batch raises SourceError).
        timeout_s: most seconds to wait for a batch before raising WorkerTimeout.
        profile: the profile to plan with (default: this device's, tuned one included,
            as :func:`edgeload.platform.profile.load_profile` finds it).
        dtype: ``torch.uint8`` (default: the frames are a view of the slot),
            ``torch.float16`` or ``torch.float32`` (values in [0, 1], made in one pass
            into an output of their own: on the CPU, or with ``device`` on the device
            from the copied slot).
        mean, std: per channel, in the output's colour order and [0, 1] units
            (torchvision's ``Normalize``), applied after scaling; float dtypes only.
            With ``layout="NCHW"``, ``color="rgb"``, ``dtype=torch.float32`` a batch
            goes into a detector (a conv net) as it is.
        stride: with ``size`` a number, each side of the output is a multiple of it
            (a detector's stride, 32 for YOLO-family models); None: 1.

    Raises:
        SourceError: a source cannot be used (missing file, unknown scheme, bad pipeline).
        ArgumentError: an option is of the wrong type or out of range (a ValueError;
            ``sources`` a lone string instead of a list, ``size=0``, ``batch="4"``,
            ``timeout_s=-1``, NaN); ``layout``, ``color``, ``resize``, ``policy``,
            ``on_error`` and ``memory_mode`` are accepted in any case;
            ``dtype``, ``mean`` or ``std`` not among what is allowed, or a float dtype
            with a ``mapped`` or ``managed`` slot and no ``device``.
    """

    def __init__(
        self,
        sources: Iterable[SourceLike],
        *,
        size: tuple[int, int] | int = (640, 640),
        batch: int | None = None,
        policy: Policy | None = None,
        deadline_ms: float | None = None,
        layout: Layout = "NHWC",
        color: Color = "bgr",
        resize: ResizeMode = "stretch",
        memory_mode: str = "auto",
        device: Any = None,
        on_error: Literal["continue", "raise"] = "continue",
        timeout_s: float = 60.0,
        profile: Profile | None = None,
        engine: Engine | None = None,
        dtype: Any = None,
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        stride: int | None = None,
    ) -> None:
        sources = check_sources(sources)  # a list: ``sources`` may be a generator
        given = [as_source(s) for s in sources]
        size = model_size(size, stride=stride, resize=resize, sources=given)
        opts = StreamSettings(size, layout, color, resize, policy, on_error, timeout_s, batch)
        memory_mode = _args.choice("StreamLoader", "memory_mode", memory_mode,
                                   (AUTO, *MEMORY_MODES))  # fmt: skip
        deadline_ms = _args.number("StreamLoader", "deadline_ms", deadline_ms, above=0,
                                   none_ok=True)  # fmt: skip
        if profile is not None and not isinstance(profile, Profile):
            raise ArgumentError(
                f"StreamLoader: profile must be an edgeload Profile or None, got "
                f"{type(profile).__name__}; load one with edgeload.platform.profile.load_profile()"
            )
        self.size = opts.size
        self._resize = opts.resize
        # Whether the loader is open; the threads hold only this (a weak call), never
        # the loader, so one dropped without ``close()`` is collected.
        running = weak_call(self._running, bool)
        copier = device_copier(device, engine)  # raises for a missing device
        self._table = table = StreamTable(opts.writer, opts.policy)
        for src in given:
            table.add(src)
        streams = table.entries()
        if not streams:
            raise ArgumentError("StreamLoader: no sources given; pass at least one")
        live = any(s.source.policy == "latest" for s in streams)
        # Files read once, as fast as they decode: the job ends with its costliest file.
        finite = all(
            s.source.kind == "file" and not (s.source.loop or s.source.realtime) for s in streams
        )
        self.platform, self.plan = plan_streams(len(streams), frame=opts.size, batch=opts.batch,
                                                live=live, finite=finite, profile=profile)  # fmt: skip
        for stream in streams:
            stream.target = self._target(stream.source)
        self._memory = memory_mode_for(memory_mode, device, self.plan, engine)
        convert = output_converter(dtype, mean, std, layout=opts.layout,
                                   memory_mode=self._memory[0], device=device)  # fmt: skip
        if convert is not None:
            self.plan = with_output(self.plan, convert.name, device)
        self.deadline_ms = deadline_ms if deadline_ms is not None else (100.0 if live else 2000.0)
        self._mux = mux = Mux(
            slot_shape=opts.slot_shape, batch=opts.batch, deadline_s=self.deadline_ms / 1000,
            all_latest=all(s.source.policy == "latest" for s in streams),
            slot_count=self.plan.slot_count, memory_mode=self._memory[0], engine=engine,
            active=table.active, tick=lambda: watchdog(table.entries()),
            all_down=table.all_down,
        )  # fmt: skip
        table.keep_placed(mux.assembler.set_streams)
        # close() and a loader dropped without it stop the same parts, which never hold
        # the loader (so it can be collected while its threads run).
        self._finalizer = weakref.finalize(self, _stop, mux, table)
        self._new_reader = functools.partial(
            reader_for, asm=mux.assembler, running=running,
            ffmpeg_threads=self.plan.threads.ffmpeg, wants_for=mux.wants_for,
            fresh_for=mux.fresh_for, fail_fast=opts.on_error == "raise",
        )  # fmt: skip
        self._delivery = Delivery(table, mux, copier=copier, raise_errors=opts.on_error == "raise",
                                  timeout_s=opts.timeout_s, size=opts.size,
                                  convert=convert)  # fmt: skip
        self._lifecycle = Lifecycle.UNOPENED

    def _running(self) -> bool:
        return self._lifecycle is Lifecycle.OPEN

    def _target(self, source: VideoSource) -> Target:
        """What this loader opens for ``source``."""
        return target_for(source, platform=self.platform, plan=self.plan, size=self.size,
                          resize=self._resize)  # fmt: skip

    def start(self) -> StreamLoader:
        """Start the reader and mux threads (iterating starts them too); returns self.

        The readers start first (local sources before network ones), then the mux
        thread, in the plan's thread budget (``cv2.setNumThreads``; FFmpeg threads
        per stream).

        Raises:
            ClosedError: after ``close()``.
        """
        self._check_open("start()")
        if self._lifecycle is Lifecycle.OPEN:
            return self
        self._lifecycle = Lifecycle.OPEN
        require_torch()  # imported now, not while the first batches wait
        require_cv2().setNumThreads(self.plan.threads.cv2)
        self._table.start_all(self._new_reader)
        self._mux.start()
        return self

    def __enter__(self) -> StreamLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[Batch]:
        self.start()
        return self

    def __next__(self) -> Batch:
        self.start()
        return self._delivery.next_batch()

    def add(self, source: SourceLike) -> int:
        """Add a source while running; returns its stream id.

        Raises:
            SourceError: the source cannot be used. ClosedError: after ``close()``.
        """
        self._check_open("add()")
        stream = self._table.add(source, self._target)
        if self._lifecycle is Lifecycle.OPEN:  # its reader starts now
            self._table.start(stream, self._new_reader, [])
        return stream.sid

    def remove(self, stream_id: int) -> None:
        """Stop and forget stream ``stream_id``.

        Raises:
            KeyError: no such stream. ClosedError: after ``close()``.
        """
        self._check_open("remove()")
        self._table.remove(stream_id, timeout_s=_JOIN_TIMEOUT_S)

    def stats(self) -> dict[str, Any]:
        """Per stream: state, fps, drops, reconnects, last error; loader: batch rate,
        queue depth, frame age p50/p99, bytes held."""
        stats = loader_stats(self._table.entries(), self._delivery.telemetry, self._mux,
                             deadline_ms=self.deadline_ms, memory=self._memory,
                             plan=self.plan)  # fmt: skip
        stats.update(self._delivery.output_stats())
        return stats

    def state_dict(self) -> dict[str, Any]:
        """Each file stream's next frame index (what the consumer received), plain data."""
        return loader_state(self._table.entries())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue each file stream after the last frame the consumer received; the
        state is checked now (each frame against its file).

        Raises:
            StateError: not a StreamLoader state (a DataLoader's, an edited one), one of
                another version or other sources, or a frame that is negative or past
                its file's end (the message names the stream and the frame). A
                ValueError. Nothing is changed then.
            ValueError: called after iteration started (resume is for a fresh loader).
        """
        started = self._lifecycle is Lifecycle.OPEN
        load_loader_state(self._table.entries(), state, started=started)

    def _check_open(self, what: str) -> None:
        if self._lifecycle is Lifecycle.CLOSED:
            raise ClosedError(f"StreamLoader: {what} after close()")

    def close(self) -> None:
        """Stop every thread, release the slots and close the sources; idempotent."""
        if self._lifecycle is Lifecycle.CLOSED:
            return
        self._lifecycle = Lifecycle.CLOSED
        self._finalizer()


def _stop(mux: Mux, table: StreamTable) -> None:
    """A loader's finalizer: stop its threads, then give its slots back."""
    # The mux and the readers stop, are joined (the timeout is for the lot), then
    # the queue and the slot pools are given back.
    mux.stop()
    threads = table.stop_readers() + mux.threads()
    join_threads(threads, timeout_s=_JOIN_TIMEOUT_S)
    mux.release()


def target_for(
    source: SourceLike,
    *,
    platform: Any = None,
    plan: Any = None,
    size: tuple[int, int] | None = None,
    resize: ResizeMode = "stretch",
) -> Target:
    """What a loader on this device would open for ``source``: backend and exact string.

    ``edgeload probe`` can show it; ``StreamLoader.stats()`` shows the same per stream.

    Args:
        source: as for :class:`StreamLoader`.
        platform: the device (default: :func:`edgeload.platform.probe.probe`).
        plan: the loader's plan (default: a plan for one stream on ``platform``).
        size, resize: the loader's output, which a GStreamer pipeline scales to
            (None: the stream's own size).

    Raises:
        SourceError: the source cannot be used here.
    """
    from ..platform.plan import plan_for
    from ..platform.probe import probe

    src = as_source(source)
    platform = probe() if platform is None else platform
    plan = plan_for(streams=1, platform=platform) if plan is None else plan
    decoder = hardware_decoder(platform)
    board: dict[str, Any] = {}
    if not getattr(platform, "live", True):
        # A board's tree (probe --root): the board's OpenCV (with GStreamer, as its plan
        # assumes) and elements, not this machine's; its cameras cannot be listed.
        board = {"gstreamer": True, "elements": board_elements(decoder),
                 "pi_cameras": lambda: None, "picamera2": False, "modes": []}  # fmt: skip
    return build_target(src.kind, src.value, backend=src.backend,
                        preferred=plan.decode_backend, decoder=decoder,
                        rtsp_transport=src.rtsp_transport, camera=src.camera,
                        output=Output(size=size, resize=resize, fps=src.fps,
                                      threads=plan.threads.ffmpeg), **board)  # fmt: skip


# A reader for this entry, gated on these events; started by the table.
MakeReader = Callable[["StreamEntry", "list[threading.Event]"], StreamReader]


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


class StreamTable:
    """A loader's :class:`StreamEntry` rows by id, and their readers' start and stop.

    Args:
        make_writer: a fresh frame writer for each new stream.
        policy: set on every source added; None leaves each source's own.
    """

    def __init__(self, make_writer: Callable[[], FrameWriter], policy: Policy | None) -> None:
        self._make_writer, self._policy = make_writer, policy
        self._streams: dict[int, StreamEntry] = {}
        self._next_id = 0
        self._lock = threading.Lock()
        self._places: Callable[[list[int]], None] = lambda ids: None

    def keep_placed(self, places: Callable[[list[int]], None]) -> None:
        """Give ``places`` (the assembler's) the stream ids now and after each change."""
        self._places = places
        places(self.ids())

    def add(
        self, source: Any, target: Callable[[VideoSource], Target] | None = None
    ) -> StreamEntry:
        """Add ``source`` (anything :func:`~edgeload.video.source.as_source` takes).

        With ``target``, the stream's target is found first, so a source that cannot be
        opened here never enters the table.

        Raises:
            SourceError: the source cannot be used.
        """
        src = as_source(source)
        if self._policy is not None:
            src.policy = self._policy
        aimed = None if target is None else target(src)
        with self._lock:
            sid, self._next_id = self._next_id, self._next_id + 1
            stream = self._streams[sid] = StreamEntry(sid, src, self._make_writer())
            stream.target = aimed
        self._places(self.ids())
        return stream

    def remove(self, sid: int, *, timeout_s: float) -> None:
        """Take stream ``sid`` out of the table, then stop its reader.

        Raises:
            KeyError: no such stream.
        """
        with self._lock:
            stream = self._streams.pop(sid)
        self._places(self.ids())
        if stream.reader is not None:
            stream.reader.stop()
            if not stream.reader.join(timeout_s):
                _log.warning("edgeload: stream %d reader did not stop in time", sid)

    def get(self, sid: int) -> StreamEntry | None:
        """Stream ``sid``, or None when it was removed."""
        with self._lock:
            return self._streams.get(sid)

    def snapshot(self) -> dict[int, StreamEntry]:
        """The streams now, by id (a copy)."""
        with self._lock:
            return dict(self._streams)

    def entries(self) -> list[StreamEntry]:
        """The streams now, in id order."""
        with self._lock:
            return list(self._streams.values())

    def ids(self) -> list[int]:
        """The stream ids now, in order (a batch's places follow it)."""
        with self._lock:
            return list(self._streams)

    def active(self) -> list[int]:
        """The ids of the streams not known to be done (not started counts as active)."""
        return [
            s.sid for s in self.entries() if s.reader is None or not s.reader.connection.phase.done
        ]

    def all_down(self) -> bool:
        """Whether no active stream can deliver now: each has tried its first open and
        none is streaming, and one is live (it may come back; a file is only starting)."""
        streams = [
            s for s in self.entries() if s.reader is None or not s.reader.connection.phase.done
        ]
        live = False
        for stream in streams:
            conn = None if stream.reader is None else stream.reader.connection
            if conn is None or not conn.opened.is_set() or conn.phase is SourceState.STREAMING:
                return False
            live = live or stream.source.live
        return live

    def phases(self) -> dict[str, str]:
        """Each stream's connection phase by name (``pending`` before its reader starts)."""
        return {s.source.name: s.reader.connection.phase.value if s.reader else "pending"
                for s in self.entries()}  # fmt: skip

    def start(
        self, stream: StreamEntry, make_reader: MakeReader, gate: list[threading.Event]
    ) -> None:
        """Make and start ``stream``'s reader."""
        stream.reader = make_reader(stream, gate)
        stream.reader.start()

    def start_all(self, make_reader: MakeReader) -> None:
        """Start every stream's reader: local inputs first, as a network open holds
        OpenCV's global FFmpeg lock; network ones wait for the local ones to open."""
        streams = self.entries()
        local = [s for s in streams if not s.source.network]
        for stream in local + [s for s in streams if s.source.network]:
            gate = [s.reader.connection.opened for s in local if s.reader]
            self.start(stream, make_reader, gate)

    def stop_readers(self) -> list[threading.Thread]:
        """Ask every reader to stop; return their threads, to join."""
        readers = [s.reader for s in self.entries() if s.reader is not None]
        for reader in readers:
            reader.stop()
        return [r.thread for r in readers]


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
    fail_fast: bool = False,
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
        wants=wants_for(stream.sid, latest), fail_fast=fail_fast,
        on_open=stream.writer.follow,  # a GStreamer pipeline may hand over scaled YUV
    )  # fmt: skip


class Delivery:
    """The consumer's side of a loader: the next batch, failed streams, the telemetry.

    Args:
        table: the loader's streams. mux: where shipped batches come from.
        copier: brings batches to the device (None: they stay on the CPU).
        raise_errors: a failed stream raises SourceError (else it is logged).
        timeout_s: most seconds to wait for a batch.
        size: the output ``(width, height)``. convert: makes model-ready frames (None:
            the uint8 slot is the batch).
    """

    def __init__(
        self, table: StreamTable, mux: Mux, *, copier: Any, raise_errors: bool, timeout_s: float,
        size: tuple[int, int], convert: Any = None,
    ) -> None:  # fmt: skip
        self._table, self._mux, self._copier = table, mux, copier
        w, h = size
        self._identity = Geometry(size, (1.0, 1.0), (0, 0), (0, 0, h, w))
        self._convert = convert
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
            streams = self._table.snapshot()
            drop_removed(item, streams)
            return build_batch(item, streams.get, self.telemetry, self._copier,
                               self._identity, self._convert)  # fmt: skip
        except BaseException:
            # Ctrl-C (or an error) before the slot was leased: it is neither leased nor
            # queued, so it goes back to its pool here; lost, each would cost a slot.
            # Once leased, the batch's views give it back and release() says so.
            with contextlib.suppress(ValueError):
                item.pool.release(item.slot)
            raise

    def output_stats(self) -> dict[str, Any]:
        """What the model-ready output costs (``output_dtype``, ``output_batch_bytes``:
        one batch's bytes beside its slot, ``outputs_made``: CPU outputs allocated)."""
        if self._convert is None:
            return {"output_dtype": "uint8", "output_batch_bytes": 0, "outputs_made": 0}
        stats: dict[str, Any] = self._convert.stats()
        return stats

    def raise_failures(self) -> None:
        """Report each stream that ended with an error, once."""
        raise_failures(self._table.entries(), raise_=self._raise_errors)


def drop_removed(sealed: Sealed, streams: dict[int, StreamEntry]) -> None:
    """Mark the frames of streams removed since ``sealed`` was shipped not valid: no
    frame of a stream arrives after ``remove()`` returned."""
    for place, sid in enumerate(sealed.stream_id.tolist()):
        if sid >= 0 and sid not in streams:
            sealed.valid[place] = False
            sealed.stream_id[place] = -1


def raise_failures(streams: Iterable[StreamEntry], *, raise_: bool) -> None:
    """Report each stream that ended with an error once: raise SourceError, or log it."""
    for stream in streams:
        conn = None if stream.reader is None else stream.reader.connection
        if conn is None or not conn.phase.done or conn.last_error is None:
            continue
        if stream.error_reported:
            continue
        stream.error_reported = True
        owner = f"stream {stream.sid} ({stream.source.name})"
        error = user_error(conn.last_error, "stream", owner=owner, source=stream.source.uri)
        if raise_:
            raise error
        _log.warning("edgeload: %s", error)


def device_copier(device: Any, engine: Engine | None) -> Any:
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
    identity: Geometry,
    convert: Any = None,
) -> Batch:
    """Lease the shipped slot to the consumer as a :class:`Batch`.

    Each place's :class:`FrameMeta` carries the geometry its frame was written with
    (``identity``, the output's own, where none was recorded). ``convert`` (a
    :class:`~edgeload.video._convert.Converter`) makes the model-ready frames.

    Without a copier the frames are a view of the slot (no copy). With one, mapped and
    managed slots are viewed by the GPU in place and pinned or host slots are copied on
    the copier's stream; either way the slot stays leased until the GPU work that
    reads it has completed, and the consumer's stream waits for the copy.
    """
    torch = require_torch()
    if copier is None:
        frames = torch.from_numpy(sealed.pool.lease(sealed.slot))
        if convert is not None:
            frames = convert.on_cpu(frames)  # the uint8 view goes: the slot is free again
    else:
        # Leased with the copier's stream current: when the view goes, the pool fences
        # the slot on that stream (and on this thread's), so it is not written again
        # before the copy, and the conversion queued after it, have read it.
        engine, stream = copier.engine, copier.stream
        with engine.use_stream(stream):
            view = sealed.pool.lease(sealed.slot)
        transfer = copier.to_device(view, hold=False)
        if convert is not None:
            from ..cuda.transfer import Transfer

            out = convert.on_device(transfer.target, engine=engine, stream=stream,
                                    device=copier.device)  # fmt: skip
            done = engine.new_event()
            done.record(stream)
            transfer = Transfer(out, event=done, nbytes=transfer.nbytes, engine=engine)
        frames = transfer.tensor()
        del view, transfer
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
        geometry = sealed.geometry[place] or identity
        metas[place] = FrameMeta(sid, seq, pts[place], captured, age, gap, geometry.source_size,
                                 geometry.scale, geometry.pad)  # fmt: skip
    telemetry.delivered(ages, now)
    return Batch(frames, torch.from_numpy(sealed.valid), tuple(metas))


STATE_VERSION = 1
LOADER = "StreamLoader"

KEY_STREAMS = "streams"
KEY_URI = "uri"
KEY_FRAME = "frame"


def loader_state(streams: Iterable[Any]) -> dict[str, Any]:
    """The numbers behind ``StreamLoader.state_dict()``."""
    return {
        KEY_VERSION: STATE_VERSION,
        KEY_LOADER: LOADER,
        KEY_STREAMS: [
            {KEY_URI: str(s.source.uri), KEY_FRAME: s.last_seq + 1}
            for s in streams
            if s.source.kind == "file"
        ],
    }


def load_loader_state(streams: Iterable[Any], state: Any, *, started: bool) -> None:
    """The work behind ``StreamLoader.load_state_dict()``: each file stream resumes.

    Everything is checked before anything changes, a resume point against its file.

    Raises:
        ValueError: the loader has ``started`` (resume is for a fresh one).
        StateError: not a StreamLoader state, one of another version or other sources,
            or a frame that is no int, negative or past the end of its file.
    """
    if started:
        raise ValueError(
            "StreamLoader.load_state_dict() must come before iteration starts; "
            "make a new loader and load the state into it"
        )
    check_version(state, LOADER, STATE_VERSION, key=KEY_STREAMS)
    files = [s for s in streams if s.source.kind == "file"]
    saved = state[KEY_STREAMS]
    if not isinstance(saved, list) or not all(isinstance(e, dict) for e in saved):
        raise StateError(
            f"StreamLoader state: streams must be a list of {{uri, frame}} objects, got "
            f"{redact(saved)[:80]}; {_UNEDITED}"
        )
    uris = [e.get(KEY_URI) for e in saved]
    if [str(s.source.uri) for s in files] != uris:
        raise StateError(
            f"StreamLoader state is for files {redact(uris)}, this loader has "
            f"{redact([str(s.source.uri) for s in files])}; give the same file sources in "
            "the same order"
        )
    frames = [
        _resume_frame(stream, entry.get(KEY_FRAME), i)
        for i, (stream, entry) in enumerate(zip_strict(files, saved))
    ]
    for stream, frame in zip_strict(files, frames):
        stream.last_seq = frame - 1


_UNEDITED = (
    "pass what StreamLoader.state_dict() returned, unedited, or start afresh without "
    "load_state_dict()"
)


def _resume_frame(stream: Any, frame: Any, index: int) -> int:
    """``frame``, checked against its file: the next frame index the stream resumes at.

    Raises:
        StateError: ``frame`` is no int, is negative, or is past the file's end.
    """
    uri = redact(stream.source.uri)
    where = f"StreamLoader state: streams[{index}].frame of {uri!r}"
    if not isinstance(frame, int) or isinstance(frame, bool) or frame < 0:
        raise StateError(f"{where} must be a frame index >= 0, got {frame!r}; {_UNEDITED}")
    # A looping file's frame numbers run on across its loops.
    if frame > 0 and not stream.source.loop:
        past = _past_end(stream.source.uri, frame)
        if past:
            raise StateError(
                f"{where} is {frame}, past the end of the file ({past}): the state is of "
                f"another, longer file; {_UNEDITED}"
            )
    return frame


def _past_end(path: Any, frame: int) -> str | None:
    """Why resuming file ``path`` at ``frame`` is past its end, or None (it is not, or
    the file cannot be opened here: the reader then reports what is wrong with it).

    The count its header declares decides, within the slack the reader allows a header;
    without one, the frame before ``frame`` must be there to grab.
    """
    cv2 = require_cv2()
    cap = cv2.VideoCapture(str(path))
    try:
        if not cap.isOpened():
            return None
        declared = int(cap.get(cv2.CAP_PROP_FRAME_COUNT) or 0)
        if declared > 0:
            if frame > declared + _TRUNCATION_SLACK_FRAMES:
                return f"it has {declared} frames"
            return None
        seek(cap, frame - 1)
        return None if cap.grab() else f"it has fewer than {frame} frames"
    finally:
        cap.release()
