"""N video sources multiplexed into fixed-size batches: :class:`StreamLoader`.

Each source has a reader thread (``edgeload-video-N``) that decodes into its own
buffer and writes the resized frame straight into its place in a batch slot; the mux
thread (``edgeload-video-mux``) ships batches to a bounded prefetcher when full or at
the deadline; the consumer gets a :class:`Batch` whose ``frames`` tensor is a view of
the slot (zero copies), and the slot is reused only once that tensor is gone.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Iterable, Iterator
from typing import Any, Literal, Union

from .._deps import require_cv2, require_torch
from ..errors import ClosedError
from ..pipeline.lifecycle import Lifecycle, join_threads, weak_call
from ..platform.profile import Profile
from ._delivery import Delivery, device_copier, reader_for
from ._mux import Mux
from ._resume import load_loader_state, loader_state
from ._settings import StreamSettings, memory_mode_for, plan_streams
from ._stream_table import StreamTable
from ._watchdog import watchdog
from .batch import Batch
from .capture import Target, build_target, hardware_decoder
from .resize import Color, Layout, ResizeMode
from .source import Policy, VideoSource, as_source
from .stats import loader_stats

_log = logging.getLogger("edgeload")

_JOIN_TIMEOUT_S = 10.0

# evaluated at import: typing.Union and a string for os.PathLike keep it valid on Python 3.8
SourceLike = Union[VideoSource, str, int, "os.PathLike[str]"]


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
        opts = StreamSettings(size, layout, color, resize, policy, on_error, timeout_s, batch)
        self.size = opts.size
        copier = device_copier(device, engine)  # raises for a missing device
        self._table = table = StreamTable(opts.writer, policy)
        for src in sources:
            table.add(src)
        streams = table.entries()
        if not streams:
            raise ValueError("StreamLoader: no sources given; pass at least one")
        live = any(s.source.policy == "latest" for s in streams)
        self.platform, self.plan = plan_streams(
            len(streams), frame=self.size, batch=batch, live=live, profile=profile
        )
        for stream in streams:
            stream.target = self._target(stream.source)
        self._memory = memory_mode_for(memory_mode, device, self.plan, engine)
        self.deadline_ms = deadline_ms if deadline_ms is not None else (100.0 if live else 2000.0)
        self._mux = mux = Mux(
            slot_shape=opts.slot_shape, batch=batch, deadline_s=self.deadline_ms / 1000,
            all_latest=all(s.source.policy == "latest" for s in streams),
            slot_count=self.plan.slot_count, memory_mode=self._memory[0], engine=engine,
            active=table.active, tick=lambda: watchdog(table.entries()),
        )  # fmt: skip
        table.keep_placed(mux.assembler.set_streams)
        # What the threads hold must not hold this loader (weak_call): one dropped without
        # close() is then collected, and __del__ stops them.
        self._new_reader = functools.partial(
            reader_for, asm=mux.assembler, running=weak_call(self._running, bool),
            ffmpeg_threads=self.plan.threads.ffmpeg, wants_for=mux.wants_for,
        )  # fmt: skip
        self._delivery = Delivery(table, mux, copier=copier, raise_errors=on_error == "raise",
                                  timeout_s=timeout_s)  # fmt: skip
        self._lifecycle = Lifecycle.UNOPENED

    def _target(self, source: VideoSource) -> Target:
        return target_for(source, platform=self.platform, plan=self.plan)

    def _running(self) -> bool:
        return self._lifecycle is Lifecycle.OPEN

    def start(self) -> StreamLoader:
        """Start the reader and mux threads (iterating starts them too); returns self.

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
        if self._lifecycle is Lifecycle.OPEN:
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
        return loader_stats(self._table.entries(), self._delivery.telemetry, self._mux,
                            deadline_ms=self.deadline_ms, memory=self._memory,
                            plan=self.plan)  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        """Each file stream's next frame index (what the consumer received), plain data."""
        return loader_state(self._table.entries())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue each file stream after the last frame the consumer received.

        Raises:
            ValueError: a state of another version or other sources; or called after
                iteration started (resume is for a fresh loader).
        """
        load_loader_state(self._table.entries(), state, started=self._lifecycle is Lifecycle.OPEN)

    def _check_open(self, what: str) -> None:
        if self._lifecycle is Lifecycle.CLOSED:
            raise ClosedError(f"StreamLoader: {what} after close()")

    def close(self) -> None:
        """Stop every thread, release the slots and close the sources; idempotent."""
        if self._lifecycle is Lifecycle.CLOSED:
            return
        self._lifecycle = Lifecycle.CLOSED
        self._mux.stop()
        threads = self._table.stop_readers() + self._mux.threads()
        join_threads(threads, timeout_s=_JOIN_TIMEOUT_S)
        self._mux.release()

    def __del__(self) -> None:
        if getattr(self, "_lifecycle", Lifecycle.CLOSED) is not Lifecycle.CLOSED:
            self.close()
