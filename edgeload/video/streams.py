"""N video sources multiplexed into fixed-size batches: :class:`StreamLoader`.

Each source has a reader thread (``edgeload-video-N``) that decodes into its own
buffer and writes the resized frame straight into its place in a batch slot; the mux
thread (``edgeload-video-mux``) ships batches to a bounded prefetcher when full or at
the deadline; the consumer gets a :class:`Batch` whose ``frames`` tensor is a view of
the slot (zero copies), and the slot is reused only once that tensor is gone.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Literal

from ..errors import ClosedError
from ..pipeline.lifecycle import Lifecycle, weak_call
from ..platform.profile import Profile
from ._parts import LoaderParts, SourceLike, target_for
from ._resize import Color, Layout, ResizeMode
from ._resume import load_loader_state, loader_state
from ._settings import StreamSettings
from .batch import Batch
from .source import Policy

__all__ = ["SourceLike", "StreamLoader", "target_for"]

_JOIN_TIMEOUT_S = 10.0


class StreamLoader:
    """Batches from several cameras, streams or files, for a model on an edge device.

    Args:
        sources: paths, URLs, camera indices, pipelines or :class:`VideoSource`.
        size: output ``(width, height)`` of every frame, whatever the input size.
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
        self._parts = parts = LoaderParts(
            sources, opts, memory_mode=memory_mode, device=device, engine=engine,
            profile=profile, deadline_ms=deadline_ms, running=weak_call(self._running, bool),
        )  # fmt: skip
        self.platform, self.plan, self.deadline_ms = parts.platform, parts.plan, parts.deadline_ms
        self._lifecycle = Lifecycle.UNOPENED

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
        self._parts.start()
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
        return self._parts.delivery.next_batch()

    def add(self, source: SourceLike) -> int:
        """Add a source while running; returns its stream id.

        Raises:
            SourceError: the source cannot be used. ClosedError: after ``close()``.
        """
        self._check_open("add()")
        return self._parts.add(source, start=self._lifecycle is Lifecycle.OPEN)

    def remove(self, stream_id: int) -> None:
        """Stop and forget stream ``stream_id``.

        Raises:
            KeyError: no such stream. ClosedError: after ``close()``.
        """
        self._check_open("remove()")
        self._parts.table.remove(stream_id, timeout_s=_JOIN_TIMEOUT_S)

    def stats(self) -> dict[str, Any]:
        """Per stream: state, fps, drops, reconnects, last error; loader: batch rate,
        queue depth, frame age p50/p99, bytes held."""
        return self._parts.stats()

    def state_dict(self) -> dict[str, Any]:
        """Each file stream's next frame index (what the consumer received), plain data."""
        return loader_state(self._parts.table.entries())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue each file stream after the last frame the consumer received.

        Raises:
            ValueError: a state of another version or other sources; or called after
                iteration started (resume is for a fresh loader).
        """
        started = self._lifecycle is Lifecycle.OPEN
        load_loader_state(self._parts.table.entries(), state, started=started)

    def _check_open(self, what: str) -> None:
        if self._lifecycle is Lifecycle.CLOSED:
            raise ClosedError(f"StreamLoader: {what} after close()")

    def close(self) -> None:
        """Stop every thread, release the slots and close the sources; idempotent."""
        if self._lifecycle is Lifecycle.CLOSED:
            return
        self._lifecycle = Lifecycle.CLOSED
        self._parts.stop(timeout_s=_JOIN_TIMEOUT_S)

    def __del__(self) -> None:
        if getattr(self, "_lifecycle", Lifecycle.CLOSED) is not Lifecycle.CLOSED:
            self.close()
