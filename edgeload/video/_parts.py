"""What a :class:`~edgeload.video.streams.StreamLoader` is made of, and the order its
threads start and stop in.

:class:`LoaderParts` is built once, in the loader's constructor, from the checked
settings: the device and its plan, each stream's target (:func:`target_for`), the
slot memory mode, the batching side (:class:`~edgeload.video._mux.Mux`), the readers'
factory and the consumer's :class:`~edgeload.video._delivery.Delivery`.  The loader
keeps the lifecycle (unopened, open, closed) and asks its parts to start and stop.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable
from typing import Any, Callable, Union

from .._deps import require_cv2, require_torch
from ..pipeline.lifecycle import join_threads
from ._capture import Target, build_target
from ._delivery import Delivery, device_copier, reader_for
from ._gstreamer import hardware_decoder
from ._mux import Mux
from ._reader import watchdog
from ._settings import StreamSettings, memory_mode_for, plan_streams
from ._stats import loader_stats
from ._stream_table import StreamTable
from .source import VideoSource, as_source

# evaluated at import: typing.Union and a string for os.PathLike keep it valid on Python 3.8
SourceLike = Union[VideoSource, str, int, "os.PathLike[str]"]


def target_for(source: SourceLike, *, platform: Any = None, plan: Any = None) -> Target:
    """What a loader on this device would open for ``source``: backend and exact string.

    ``edgeload probe`` can show it; ``StreamLoader.stats()`` shows the same per stream.

    Args:
        source: as for :class:`~edgeload.video.streams.StreamLoader`.
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


class LoaderParts:
    """A loader's streams, plan, mux and delivery, wired together.

    Args:
        sources: as for :class:`~edgeload.video.streams.StreamLoader`.
        opts: the loader's checked settings.
        memory_mode, device, engine, profile, deadline_ms: as for the loader.
        running: whether the loader is open; the threads hold only this (a weak call),
            never the loader, so one dropped without ``close()`` is collected.

    Raises:
        SourceError: a source cannot be used. ValueError: no sources, or an option is
            out of range.
    """

    def __init__(
        self,
        sources: Iterable[SourceLike],
        opts: StreamSettings,
        *,
        memory_mode: str,
        device: Any,
        engine: Any,
        profile: Any,
        deadline_ms: float | None,
        running: Callable[[], bool],
    ) -> None:
        copier = device_copier(device, engine)  # raises for a missing device
        self.table = table = StreamTable(opts.writer, opts.policy)
        for src in sources:
            table.add(src)
        streams = table.entries()
        if not streams:
            raise ValueError("StreamLoader: no sources given; pass at least one")
        live = any(s.source.policy == "latest" for s in streams)
        # Files read once, as fast as they decode: the job ends with its costliest file.
        finite = all(
            s.source.kind == "file" and not (s.source.loop or s.source.realtime) for s in streams
        )
        self.platform, self.plan = plan_streams(len(streams), frame=opts.size, batch=opts.batch,
                                                live=live, finite=finite, profile=profile)  # fmt: skip
        for stream in streams:
            stream.target = self.target(stream.source)
        self.memory = memory_mode_for(memory_mode, device, self.plan, engine)
        self.deadline_ms = deadline_ms if deadline_ms is not None else (100.0 if live else 2000.0)
        self.mux = mux = Mux(
            slot_shape=opts.slot_shape, batch=opts.batch, deadline_s=self.deadline_ms / 1000,
            all_latest=all(s.source.policy == "latest" for s in streams),
            slot_count=self.plan.slot_count, memory_mode=self.memory[0], engine=engine,
            active=table.active, tick=lambda: watchdog(table.entries()),
        )  # fmt: skip
        table.keep_placed(mux.assembler.set_streams)
        self._new_reader = functools.partial(
            reader_for, asm=mux.assembler, running=running,
            ffmpeg_threads=self.plan.threads.ffmpeg, wants_for=mux.wants_for,
            fresh_for=mux.fresh_for,
        )  # fmt: skip
        self.delivery = Delivery(table, mux, copier=copier, raise_errors=opts.on_error == "raise",
                                 timeout_s=opts.timeout_s)  # fmt: skip

    def target(self, source: VideoSource) -> Target:
        """What this loader opens for ``source``."""
        return target_for(source, platform=self.platform, plan=self.plan)

    def start(self) -> None:
        """Start the readers (local sources first) and the mux thread, in the plan's
        thread budget (``cv2.setNumThreads``; FFmpeg threads per stream)."""
        require_torch()  # imported now, not while the first batches wait
        require_cv2().setNumThreads(self.plan.threads.cv2)
        self.table.start_all(self._new_reader)
        self.mux.start()

    def add(self, source: SourceLike, *, start: bool) -> int:
        """Add a stream, with its reader started if ``start``; returns its id."""
        stream = self.table.add(source, self.target)
        if start:
            self.table.start(stream, self._new_reader, [])
        return stream.sid

    def stop(self, timeout_s: float) -> None:
        """Stop the mux and the readers, join them all (``timeout_s`` for the lot),
        then give back the queue and the slot pools."""
        self.mux.stop()
        threads = self.table.stop_readers() + self.mux.threads()
        join_threads(threads, timeout_s=timeout_s)
        self.mux.release()

    def stats(self) -> dict[str, Any]:
        """The loader's ``stats()``."""
        return loader_stats(self.table.entries(), self.delivery.telemetry, self.mux,
                            deadline_ms=self.deadline_ms, memory=self.memory,
                            plan=self.plan)  # fmt: skip
