"""N video sources multiplexed into fixed-size batches: :class:`StreamLoader`.

Each source has a reader thread (``edgeload-video-N``) that decodes into its own
buffer and writes the resized frame straight into its place in a batch slot; the mux
thread (``edgeload-video-mux``) ships batches to a bounded prefetcher when full or at
the deadline; the consumer gets a :class:`Batch` whose ``frames`` tensor is a view of
the slot (zero copies), and the slot is reused only once that tensor is gone.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from .._deps import require_cv2, require_torch
from .._lifecycle import POLL_INTERVAL_S, State, join_threads
from ..buffers import SlotPool
from ..errors import ClosedError, SourceError
from ..prefetch import END, Prefetcher
from .backends import build_target, hardware_decoder
from .batching import Assembler, Sealed
from .reader import StreamReader
from .resize import Color, FrameWriter, Layout, ResizeMode
from .source import FrameInfo, Policy, VideoSource, as_source
from .stats import load_loader_state, loader_state, loader_stats

_log = logging.getLogger("edgeload")

_JOIN_TIMEOUT_S = 10.0
_WINDOW = 2048  # recent frame ages kept for the percentiles

SourceLike = VideoSource | str | int | os.PathLike[str]


@dataclass(frozen=True)
class FrameMeta:
    """What the consumer knows about one frame of a batch."""

    stream_id: int
    seq: int
    """The source's own frame number; a gap from the stream's previous frame is a drop."""
    pts_ms: float
    captured_at: float
    """``time.monotonic()`` when it was grabbed."""
    age_ms: float
    """Milliseconds from grab to delivery to the consumer."""
    dropped: int
    """Frames of this stream dropped (or skipped by ``fps``) since its previous one."""


@dataclass(frozen=True)
class Batch:
    """One batch: ``frames`` (uint8 tensor), ``valid`` (bool tensor) and ``meta`` per place."""

    frames: Any
    """``(B, H, W, 3)`` or ``(B, 3, H, W)`` uint8 torch tensor, a view of the slot."""
    valid: Any
    """``(B,)`` bool torch tensor: which places hold a frame (a partial batch has gaps)."""
    meta: tuple[FrameMeta | None, ...]
    """Per place: its frame's metadata, or None where ``valid`` is False."""


class _Stream:
    def __init__(self, sid: int, source: VideoSource, writer: FrameWriter) -> None:
        self.sid, self.source, self.writer = sid, source, writer
        self.reader: StreamReader | None = None
        self.last_seq = -1
        self.delivered = 0
        self.drops = 0
        self.error_reported = False


class StreamLoader:
    """Batches from several cameras, streams or files, for a model on an edge device.

    Args:
        sources: paths, URLs, camera indices, pipelines or :class:`VideoSource`.
        size: output ``(width, height)`` of every frame, whatever the input size.
        batch: places per batch; None: one per stream.
        policy: ``latest`` or ``every`` for every source; None: each source's default
            (``latest`` for live inputs, ``every`` for files).
        deadline_ms: ship a partial batch this long after its first frame; None:
            100 ms with a live source, else 2000 ms.
        layout: ``NHWC`` or ``NCHW``. color: ``bgr`` or ``rgb``.
        resize: ``stretch`` or ``letterbox``.
        memory_mode: slot memory (``auto``: ``host``, or the plan's with a ``device``).
        device: a torch device to move batches to; None keeps them on the CPU (zero-copy).
        on_error: ``continue`` (a failed stream ends; its error is in ``stats()``) or
            ``raise`` (the next batch raises SourceError).
        timeout_s: most seconds to wait for a batch before raising WorkerTimeout.

    Raises:
        SourceError: a source cannot be used (missing file, unknown scheme, bad pipeline).
        ValueError: an option is out of range.
    """

    def __init__(
        self,
        sources: Iterable[SourceLike],
        *,
        size: tuple[int, int] = (640, 640),
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
    ) -> None:
        for name, value, allowed in (
            ("layout", layout, ("NHWC", "NCHW")),
            ("color", color, ("bgr", "rgb")),
            ("resize", resize, ("stretch", "letterbox")),
            ("on_error", on_error, ("continue", "raise")),
            ("policy", policy, ("latest", "every", None)),
        ):
            if value not in allowed:
                raise ValueError(f"StreamLoader: {name} must be one of {allowed}, got {value!r}")
        if len(size) != 2 or min(size) < 1:
            raise ValueError(f"StreamLoader: size must be (width, height) > 0, got {size}")
        if batch is not None and batch < 1:
            raise ValueError(f"StreamLoader: batch must be >= 1 or None, got {batch}")
        self.size = (int(size[0]), int(size[1]))
        self._opts: dict[str, Any] = dict(layout=layout, color=color, resize=resize)
        self._policy, self._on_error, self._timeout_s = policy, on_error, timeout_s
        self._device = device
        self._streams: dict[int, _Stream] = {}
        self._next_id = 0
        self._lock = threading.Lock()
        for src in sources:
            self._make_stream(src)
        if not self._streams:
            raise ValueError("StreamLoader: no sources given; pass at least one")
        from ..plan import plan_for
        from ..probe import probe

        self.platform = probe()
        self.plan = plan_for(
            streams=len(self._streams), frame=self.size, batch=batch, platform=self.platform
        )
        self._decoder = hardware_decoder(self.platform)
        for stream in self._streams.values():
            self._target(stream)
        self._mode = "host" if memory_mode == "auto" and device is None else memory_mode
        if self._mode == "auto":
            self._mode = self.plan.memory_mode
        live = any(s.source.policy == "latest" for s in self._streams.values())
        all_latest = all(s.source.policy == "latest" for s in self._streams.values())
        self.deadline_ms = deadline_ms if deadline_ms is not None else (100.0 if live else 2000.0)
        depth = 1 if all_latest else max(1, self.plan.slot_count - 2)
        self._prefetch: Prefetcher[Sealed] = Prefetcher(
            max_items=depth,
            policy="latest" if all_latest else "block",
            on_drop=lambda sealed: sealed.pool.release(sealed.slot),
            name="StreamLoader prefetch",
        )
        self._depth = depth
        self._asm = Assembler(
            self._make_pool,
            batch=batch,
            deadline_s=self.deadline_ms / 1000,
            prefetcher=self._prefetch,
            active=self._active,
        )
        self._asm.set_streams(list(self._streams))
        self._mux = threading.Thread(target=self._asm.run, name="edgeload-video-mux", daemon=True)
        self._state = State.OPEN
        self._started = False
        self._ages: collections.deque[float] = collections.deque(maxlen=_WINDOW)
        self._delivered_at: collections.deque[float] = collections.deque(maxlen=64)
        self._batches = 0

    def _make_stream(self, src: SourceLike) -> _Stream:
        source = as_source(src)
        if self._policy is not None:
            source.policy = self._policy
        with self._lock:
            sid, self._next_id = self._next_id, self._next_id + 1
            stream = self._streams[sid] = _Stream(
                sid, source, FrameWriter(size=self.size, **self._opts)
            )
        return stream

    def _target(self, stream: _Stream) -> None:
        src = stream.source
        stream.target = build_target(  # type: ignore[attr-defined]
            src.kind, src.value, backend=src.backend,
            preferred=self.plan.decode_backend, decoder=self._decoder,
        )  # fmt: skip

    def _make_pool(self, places: int) -> SlotPool:
        w, h = self.size
        shape = (places, h, w, 3) if self._opts["layout"] == "NHWC" else (places, 3, h, w)
        # Prefetched + the open one + one being shipped + two the consumer may hold.
        return SlotPool(shape, np.uint8, count=self._depth + 4, mode=self._mode,  # type: ignore[arg-type]
                        name="StreamLoader slots")  # fmt: skip

    def _active(self) -> list[int]:
        with self._lock:
            streams = list(self._streams.values())
        return [s.sid for s in streams if s.reader is None or not s.reader.state.done]

    def _sink(self, stream: _Stream) -> Any:
        asm, writer, latest = self._asm, stream.writer, stream.source.policy == "latest"

        def sink(frame: np.ndarray, info: FrameInfo) -> bool:
            claim = asm.claim(stream.sid, latest=latest)
            if claim is None:
                return self._state is State.OPEN
            batch, place = claim
            try:
                writer.write(frame, batch.slot.array[place])
            except BaseException:
                asm.commit(batch, place, None)
                raise
            asm.commit(batch, place, info)
            return True

        return sink

    def _start_reader(self, stream: _Stream, gate: list[threading.Event]) -> None:
        src = stream.source
        stream.reader = StreamReader(
            src, stream.target,  # type: ignore[attr-defined]
            stream_id=stream.sid, sink=self._sink(stream),
            ffmpeg_threads=self.plan.threads.ffmpeg, start_frame=stream.last_seq + 1,
            gate=gate if src.network else None,
        )  # fmt: skip
        stream.reader.start()

    def start(self) -> StreamLoader:
        """Start the reader and mux threads (iterating starts them too); returns self.

        Raises:
            ClosedError: after ``close()``.
        """
        self._check_open("start()")
        if self._started:
            return self
        self._started = True
        require_torch()  # imported now, not while the first batches wait
        require_cv2().setNumThreads(self.plan.threads.cv2)
        with self._lock:
            streams = list(self._streams.values())
        # Local inputs open first: a network open holds OpenCV's global FFmpeg lock.
        local = [s for s in streams if not s.source.network]
        for stream in local + [s for s in streams if s.source.network]:
            self._start_reader(stream, [s.reader.opened for s in local if s.reader])
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
        deadline = time.monotonic() + self._timeout_s
        while True:
            self._raise_failures()
            try:
                item = self._prefetch.get(timeout_s=POLL_INTERVAL_S)
                break
            except ClosedError:
                raise StopIteration from None
            except TimeoutError:
                if time.monotonic() > deadline:
                    raise
        if item is END:
            self._raise_failures()
            raise StopIteration
        return self._deliver(item)  # type: ignore[arg-type]

    def _raise_failures(self) -> None:
        for stream in list(self._streams.values()):
            reader = stream.reader
            if reader is None or not reader.state.done or reader.last_error is None:
                continue
            if stream.error_reported:
                continue
            stream.error_reported = True
            message = f"stream {stream.sid} ({stream.source.name}): {reader.last_error}"
            if self._on_error == "raise":
                raise SourceError(message, source=stream.source.uri)
            _log.warning("edgeload: %s", message)

    def _deliver(self, sealed: Sealed) -> Batch:
        torch = require_torch()
        view = sealed.pool.lease(sealed.slot)
        frames = torch.from_numpy(view)
        if self._device is not None:
            frames = frames.to(self._device, non_blocking=True)
        now = time.monotonic()
        metas: list[FrameMeta | None] = []
        for place in range(len(sealed.valid)):
            if not sealed.valid[place]:
                metas.append(None)
                continue
            sid, seq = int(sealed.stream_id[place]), int(sealed.seq[place])
            stream = self._streams.get(sid)
            gap = 0
            if stream is not None:
                gap = max(0, seq - stream.last_seq - 1) if seq > stream.last_seq else 0
                stream.last_seq, stream.drops = seq, stream.drops + gap
                stream.delivered += 1
            age = (now - float(sealed.captured_at[place])) * 1000.0
            self._ages.append(age)
            metas.append(FrameMeta(sid, seq, float(sealed.pts_ms[place]),
                                   float(sealed.captured_at[place]), age, gap))  # fmt: skip
        self._batches += 1
        self._delivered_at.append(now)
        return Batch(frames, torch.from_numpy(sealed.valid), tuple(metas))

    def add(self, source: SourceLike) -> int:
        """Add a source while running; returns its stream id.

        Raises:
            SourceError: the source cannot be used. ClosedError: after ``close()``.
        """
        self._check_open("add()")
        stream = self._make_stream(source)
        self._target(stream)
        self._asm.set_streams(list(self._streams))
        if self._started:
            self._start_reader(stream, [])
        return stream.sid

    def remove(self, stream_id: int) -> None:
        """Stop and forget stream ``stream_id``.

        Raises:
            KeyError: no such stream. ClosedError: after ``close()``.
        """
        self._check_open("remove()")
        with self._lock:
            stream = self._streams.pop(stream_id)
        self._asm.set_streams(list(self._streams))
        if stream.reader is not None:
            stream.reader.stop()
            if not stream.reader.join(_JOIN_TIMEOUT_S):
                _log.warning("edgeload: stream %d reader did not stop in time", stream_id)

    def stats(self) -> dict[str, Any]:
        """Per stream: state, fps, drops, reconnects, last error; loader: batch rate,
        queue depth, frame age p50/p99, bytes held."""
        return loader_stats(self)

    def state_dict(self) -> dict[str, Any]:
        """Each file stream's next frame index (what the consumer received), plain data."""
        return loader_state(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue each file stream after the last frame the consumer received.

        Raises:
            ValueError: a state of another version or other sources; or called after
                iteration started (resume is for a fresh loader).
        """
        load_loader_state(self, state)

    def _check_open(self, what: str) -> None:
        if self._state is State.CLOSED:
            raise ClosedError(f"StreamLoader: {what} after close()")

    def close(self) -> None:
        """Stop every thread, release the slots and close the sources; idempotent."""
        if self._state is State.CLOSED:
            return
        self._state = State.CLOSED
        self._asm.stop()
        readers = [s.reader for s in self._streams.values() if s.reader is not None]
        for reader in readers:
            reader.stop()
        threads = [r.thread for r in readers] + ([self._mux] if self._mux.ident else [])
        join_threads(threads, timeout_s=_JOIN_TIMEOUT_S)
        for sealed in self._prefetch.drain():
            sealed.pool.release(sealed.slot)
        self._prefetch.close()
        for pool in self._asm.pools():
            pool.close()

    def __del__(self) -> None:
        if getattr(self, "_state", State.CLOSED) is State.OPEN:
            self.close()
