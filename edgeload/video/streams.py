"""N video sources multiplexed into fixed-size batches: :class:`StreamLoader`.

Each source has a reader thread (``edgeload-video-N``) that decodes into its own
buffer and writes the resized frame straight into its place in a batch slot; the mux
thread (``edgeload-video-mux``) ships batches to a bounded prefetcher when full or at
the deadline; the consumer gets a :class:`Batch` whose ``frames`` tensor is a view of
the slot (zero copies), and the slot is reused only once that tensor is gone.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any, Literal, Union

import numpy as np

from .._deps import require_cv2, require_torch
from ..errors import ClosedError, WorkerTimeout
from ..pipeline.lifecycle import POLL_INTERVAL_S, State, join_threads, weak_call
from ..pipeline.prefetch import END, Prefetcher
from ..pipeline.slots import SlotPool
from ..platform.profile import Profile
from ._delivery import (
    StreamEntry,
    build_batch,
    check_slot_mode,
    device_copier,
    make_sink,
    raise_failures,
)
from ._watchdog import watchdog
from .assembler import MAX_OPEN, Assembler, Sealed
from .batch import Batch
from .capture import Target, build_target, hardware_decoder
from .demand import Demand
from .reader import StreamReader
from .resize import Color, FrameWriter, Layout, ResizeMode
from .source import Policy, VideoSource, as_source
from .stats import Telemetry, load_loader_state, loader_state, loader_stats

_log = logging.getLogger("edgeload")

_JOIN_TIMEOUT_S = 10.0

# evaluated at import: typing.Union and a string for os.PathLike keep it valid on Python 3.8
SourceLike = Union[VideoSource, str, int, "os.PathLike[str]"]


def _loader_gone() -> SlotPool:
    raise ClosedError("StreamLoader: garbage-collected while its threads still ran")


def target_for(source: SourceLike, *, platform: Any = None, plan: Any = None) -> Target:
    """What a loader on this device would open for ``source``: backend and exact string.

    ``edgeload probe`` can show it; ``StreamLoader.stats()`` shows the same per stream.

    Args:
        source: as for :class:`StreamLoader`.
        platform: the device (default: :func:`edgeload.platform.probe.probe`).
        plan: the loader's plan (default: a plan for one stream on ``platform``).

    Raises:
        SourceError: the source cannot be used here.
    """
    from ..platform.plan import plan_for
    from ..platform.probe import probe

    src = as_source(source)
    platform = probe() if platform is None else platform
    plan = plan_for(streams=1, platform=platform) if plan is None else plan
    return build_target(src.kind, src.value, backend=src.backend,
                        preferred=plan.decode_backend, decoder=hardware_decoder(platform),
                        rtsp_transport=src.rtsp_transport)  # fmt: skip


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
        device: a CUDA device to move batches to; None keeps them on the CPU (zero-copy).
        engine: the GPU engine behind ``device`` and the GPU memory modes (default:
            CUDA through torch; ``edgeload.cuda.host_engine.HostEngine`` runs them on
            the CPU, for tests).
        on_error: ``continue`` (a failed stream ends; its error is in ``stats()``) or
            ``raise`` (the next batch raises SourceError).
        timeout_s: most seconds to wait for a batch before raising WorkerTimeout.
        profile: the profile to plan with (default: this device's, tuned one included,
            as :func:`edgeload.platform.profile.load_profile` finds it).

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
        profile: Profile | None = None,
        engine: Any = None,
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
        self._engine = engine
        self._copier = device_copier(device, engine)  # raises for a missing device
        self._streams: dict[int, StreamEntry] = {}
        self._next_id = 0
        self._lock = threading.Lock()
        for src in sources:
            self._make_stream(src)
        if not self._streams:
            raise ValueError("StreamLoader: no sources given; pass at least one")
        from ..platform.plan import plan_for
        from ..platform.probe import probe

        self.platform = probe()
        live = any(s.source.policy == "latest" for s in self._streams.values())
        self.plan = plan_for(
            streams=len(self._streams),
            frame=self.size,
            batch=batch,
            live=live,
            platform=self.platform,
            profile=profile,
        )
        for stream in self._streams.values():
            self._target(stream)
        self._mode = "host" if memory_mode == "auto" and device is None else memory_mode
        self._mode_reason = (
            "no device= given: frames stay in host memory"
            if memory_mode == "auto" and device is None
            else f"set by arguments (the plan: {self.plan.reasons['memory_mode']})"
        )
        if self._mode == "auto":
            self._mode = self.plan.memory_mode
            self._mode_reason = self.plan.reasons["memory_mode"]
        elif self._mode != "host":
            check_slot_mode(self._mode, engine)  # here, not later in the mux thread
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
        # Only when every stream is ``latest`` can a frame be known not to ship.
        # What the threads hold must not hold this loader (weak_call): one dropped without
        # close() is then collected, and __del__ stops them.
        prefetch = self._prefetch
        self._demand = Demand(lambda: prefetch.stats().depth) if all_latest else None
        self._asm = Assembler(
            weak_call(self._make_pool, _loader_gone),
            batch=batch,
            deadline_s=self.deadline_ms / 1000,
            prefetcher=self._prefetch,
            active=weak_call(self._active, list),
            tick=weak_call(self._tick, lambda: None),
        )
        self._asm.set_streams(list(self._streams))
        self._mux = threading.Thread(target=self._asm.run, name="edgeload-video-mux", daemon=True)
        self._state = State.UNOPENED
        self._telemetry = Telemetry()

    def _make_stream(self, src: SourceLike) -> StreamEntry:
        source = as_source(src)
        if self._policy is not None:
            source.policy = self._policy
        with self._lock:
            sid, self._next_id = self._next_id, self._next_id + 1
            stream = self._streams[sid] = StreamEntry(
                sid, source, FrameWriter(size=self.size, **self._opts)
            )
        return stream

    def _target(self, stream: StreamEntry) -> None:
        stream.target = target_for(stream.source, platform=self.platform, plan=self.plan)

    def _make_pool(self, places: int) -> SlotPool:
        w, h = self.size
        shape = (places, h, w, 3) if self._opts["layout"] == "NHWC" else (places, 3, h, w)
        # Prefetched + the open ones + one being shipped + two the consumer may hold.
        count = self._depth + MAX_OPEN + 3
        return SlotPool(shape, np.uint8, count=count, mode=self._mode,  # type: ignore[arg-type]
                        name="StreamLoader slots", engine=self._engine)  # fmt: skip

    def _tick(self) -> None:
        watchdog(self._streams_now())

    def _streams_now(self) -> list[StreamEntry]:
        with self._lock:
            return list(self._streams.values())

    def _running(self) -> bool:
        return self._state is State.OPEN

    def _active(self) -> list[int]:
        with self._lock:
            streams = list(self._streams.values())
        return [s.sid for s in streams if s.reader is None or not s.reader.connection.phase.done]

    def _start_reader(self, stream: StreamEntry, gate: list[threading.Event]) -> None:
        src = stream.source
        stream.reader = StreamReader(
            src, stream.target,
            stream_id=stream.sid, sink=make_sink(self._asm, stream, weak_call(self._running, bool)),
            ffmpeg_threads=self.plan.threads.ffmpeg, start_frame=stream.last_seq + 1,
            gate=gate if src.network else None,
            wants=self._demand.wants if self._demand and src.policy == "latest" else None,
        )  # fmt: skip
        stream.reader.start()

    def start(self) -> StreamLoader:
        """Start the reader and mux threads (iterating starts them too); returns self.

        Raises:
            ClosedError: after ``close()``.
        """
        self._check_open("start()")
        if self._state is State.OPEN:
            return self
        self._state = State.OPEN
        require_torch()  # imported now, not while the first batches wait
        require_cv2().setNumThreads(self.plan.threads.cv2)
        with self._lock:
            streams = list(self._streams.values())
        # Local inputs open first: a network open holds OpenCV's global FFmpeg lock.
        local = [s for s in streams if not s.source.network]
        for stream in local + [s for s in streams if s.source.network]:
            self._start_reader(stream, [s.reader.connection.opened for s in local if s.reader])
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
        if self._demand is not None:
            self._demand.asked()
        while True:
            raise_failures(self._streams_now(), raise_=self._on_error == "raise")
            try:
                item = self._prefetch.get(timeout_s=POLL_INTERVAL_S)
                break
            except ClosedError:
                raise StopIteration from None
            except TimeoutError:
                if time.monotonic() > deadline:
                    states = {s.source.name: s.reader.connection.phase.value if s.reader else "pending"
                              for s in self._streams.values()}  # fmt: skip
                    raise WorkerTimeout(
                        f"StreamLoader: no batch within timeout_s={self._timeout_s} s; stream "
                        f"states {states}; see stats() for errors, or raise timeout_s=",
                        worker="edgeload-video-mux",
                    ) from None
        if item is END:
            raise_failures(self._streams_now(), raise_=self._on_error == "raise")
            raise StopIteration
        batch = build_batch(item, self._streams, self._telemetry, self._copier)  # type: ignore[arg-type]
        if self._demand is not None:
            self._demand.taken()
        return batch

    def add(self, source: SourceLike) -> int:
        """Add a source while running; returns its stream id.

        Raises:
            SourceError: the source cannot be used. ClosedError: after ``close()``.
        """
        self._check_open("add()")
        stream = self._make_stream(source)
        self._target(stream)
        self._asm.set_streams(list(self._streams))
        if self._state is State.OPEN:
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
        settings = {
            "deadline_ms": self.deadline_ms,
            "memory_mode": self._mode,
            "memory_mode_reason": self._mode_reason,
            "plan": self.plan.describe(),
        }
        return loader_stats(
            self._streams_now(), self._telemetry, self._prefetch, self._asm, settings
        )

    def state_dict(self) -> dict[str, Any]:
        """Each file stream's next frame index (what the consumer received), plain data."""
        return loader_state(self._streams_now())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue each file stream after the last frame the consumer received.

        Raises:
            ValueError: a state of another version or other sources; or called after
                iteration started (resume is for a fresh loader).
        """
        if self._state is State.OPEN:
            raise ValueError(
                "StreamLoader.load_state_dict() must come before iteration starts; "
                "make a new loader and load the state into it"
            )
        load_loader_state(self._streams_now(), state)

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
        if getattr(self, "_state", State.CLOSED) is not State.CLOSED:
            self.close()
