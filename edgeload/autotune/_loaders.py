"""The two real workloads autotune measures: video streams and a dataset."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from .._deps import require_torch
from ..errors import SourceError
from ..platform.probe import probe
from ..platform.profile import load_profile
from ._workloads import Batches, profile_settings, sample_bytes

# The profile keys that change how a StreamLoader plans (one decode thread per stream
# is fixed, so worker kind and count do not apply to video).
VIDEO_KNOBS = ("thread_budget", "batch_size", "prefetch_bytes", "memory_mode", "decode_backend")
DATASET_KNOBS = (
    "worker_kind",
    "num_workers",
    "thread_budget",
    "batch_size",
    "prefetch_bytes",
    "memory_mode",
)


class VideoWorkload:
    """N video sources batched by :class:`~edgeload.video.streams.StreamLoader`.

    Files are looped during trials, so a short clip stands in for a long recording.

    Args:
        sources: paths, URLs, camera indices or pipelines.
        size: output ``(width, height)`` of every frame.
        batch: places per batch; None: one per stream.
        open_timeout_s: the check before the trials waits this long for a first batch.
    """

    kind = "video"
    knob_names = VIDEO_KNOBS

    def __init__(
        self,
        sources: Sequence[str | int],
        *,
        size: tuple[int, int] = (640, 640),
        batch: int | None = None,
        open_timeout_s: float = 20.0,
    ) -> None:
        if not sources:
            raise SourceError("autotune: no video sources given; pass --video SOURCE")
        self.sources = list(sources)
        self.size = size
        self.batch = batch or len(self.sources)
        self.open_timeout_s = open_timeout_s
        w, h = size
        self.name = f"video: {len(self.sources)} stream(s) -> {self.batch} x {w}x{h}"

    def plan_args(self, batch: int) -> dict[str, Any]:
        """``plan_for`` arguments: streams, frame size, batch, and whether any is live."""
        from ..video.source import VideoSource

        live = any(VideoSource(uri).policy == "latest" for uri in self.sources)
        return {"streams": len(self.sources), "frame": self.size, "batch": batch, "live": live}

    def batch_bytes(self, batch: int) -> int:
        """One batch of uint8 RGB frames, bytes."""
        return self.size[0] * self.size[1] * 3 * batch

    def _video_sources(self, *, loop: bool) -> list[Any]:
        from ..video.source import VideoSource

        out = []
        for uri in self.sources:
            try:
                probe_source = VideoSource(uri)
                out.append(VideoSource(uri, loop=loop) if probe_source.kind == "file" else uri)
            except ValueError as exc:
                raise SourceError(f"video source {uri!r}: {exc}", source=uri) from exc
        return out

    def check(self) -> None:
        """Open every source and wait for one batch.

        Raises:
            SourceError: a source is missing, unreadable or silent (naming it).
        """
        from ..video.streams import StreamLoader

        loader = StreamLoader(
            self._video_sources(loop=False),
            size=self.size,
            batch=self.batch,
            on_error="raise",
            timeout_s=self.open_timeout_s,
        )
        try:
            next(iter(loader))
        except StopIteration:
            raise SourceError(f"autotune: {self.sources} delivered no frame") from None
        except TimeoutError as exc:
            raise SourceError(
                f"autotune: no frame from {self.sources} within {self.open_timeout_s:g} s; "
                "check the sources are reachable",
                source=self.sources,
            ) from exc
        finally:
            loader.close()

    @contextlib.contextmanager
    def open(self, config: Mapping[str, Any]) -> Iterator[Batches]:
        """A StreamLoader planned from ``config``, as the written profile will plan it."""
        from ..video.streams import StreamLoader

        batch = int(config.get("batch_size", self.batch))
        planned = {k: v for k, v in config.items() if k != "batch_size"}
        profile = load_profile(probe(), tuned=None, **profile_settings(planned))
        loader = StreamLoader(
            self._video_sources(loop=True),
            size=self.size,
            batch=batch,
            memory_mode=str(config.get("memory_mode", "auto")),
            on_error="raise",
            timeout_s=self.open_timeout_s,
            profile=profile,
        )
        try:
            yield _frames(loader)
        finally:
            loader.close()


def _frames(loader: Any) -> Batches:
    for batch in loader:
        ages = [m.age_ms for m in batch.meta if m is not None]
        yield len(ages), ages


class DatasetWorkload:
    """A dataset batched by :class:`edgeload.DataLoader`, epoch after epoch.

    Args:
        dataset: a map-style or iterable dataset (torch's sense).
        batch_size: samples per batch.
        name: a label for the report.
        timeout_s: most seconds to wait for one batch.
    """

    kind = "dataset"
    knob_names = DATASET_KNOBS

    def __init__(
        self, dataset: Any, *, batch_size: int = 32, name: str = "", timeout_s: float = 60.0
    ) -> None:
        if batch_size < 1:
            raise SourceError(f"autotune: --batch-size must be >= 1, got {batch_size}")
        self.dataset = dataset
        self.batch = batch_size
        self.timeout_s = timeout_s
        self.item_bytes = 0
        self.name = f"dataset: {name or type(dataset).__name__}, batches of {batch_size}"

    def check(self) -> None:
        """Read one sample, to size the batches.

        Raises:
            SourceError: the dataset is empty or its first sample raises.
        """
        try:
            if hasattr(self.dataset, "__getitem__") and hasattr(self.dataset, "__len__"):
                if len(self.dataset) == 0:
                    raise SourceError(f"autotune: {self.name} is empty")
                sample = self.dataset[0]
            else:
                sample = next(iter(self.dataset))
        except SourceError:
            raise
        except Exception as exc:
            raise SourceError(
                f"autotune: reading the first sample of {self.name} raised "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        self.item_bytes = max(1, sample_bytes(sample))

    def plan_args(self, batch: int) -> dict[str, Any]:
        """``plan_for`` arguments: item size and batch."""
        return {"item_bytes": self.item_bytes, "batch": batch}

    def batch_bytes(self, batch: int) -> int:
        """One collated batch, bytes."""
        return self.item_bytes * batch

    @contextlib.contextmanager
    def open(self, config: Mapping[str, Any]) -> Iterator[Batches]:
        """An edgeload DataLoader with ``config``'s settings; the consumer's torch
        threads are what the plan leaves of the thread budget."""
        from ..dataset.loader import DataLoader

        torch = require_torch()
        workers = int(config.get("num_workers", 1))
        budget = int(config.get("thread_budget", 1))
        old_threads = torch.get_num_threads()
        torch.set_num_threads(max(1, budget - min(budget, workers)))
        with warnings.catch_warnings():
            # The sweep tries worker counts past the CPU count on purpose (measuring is
            # how it finds out): torch's over-subscription warning is not news here.
            warnings.filterwarnings("ignore", "This DataLoader will create", UserWarning)
            loader: DataLoader[Any] = DataLoader(
                self.dataset,
                batch_size=int(config.get("batch_size", self.batch)),
                num_workers=workers,
                worker_kind=config.get("worker_kind", "auto"),
                prefetch_bytes=config.get("prefetch_bytes"),
                memory_mode=str(config.get("memory_mode", "auto")),
                timeout=self.timeout_s,
                # A trial spans many epochs of a small dataset; restarting process workers
                # each epoch would measure start-up, not loading.
                persistent_workers=workers > 0,
            )
        try:
            yield _samples(loader)
        finally:
            loader.close()
            torch.set_num_threads(old_threads)


def _samples(loader: Any) -> Batches:
    while True:
        empty = True
        for batch in loader:
            empty = False
            yield _batch_len(batch), None
        if empty:
            return


def _batch_len(batch: Any) -> int:
    if hasattr(batch, "shape") and len(batch.shape) > 0:
        return int(batch.shape[0])
    if isinstance(batch, Mapping) and batch:
        return _batch_len(next(iter(batch.values())))
    if isinstance(batch, (list, tuple)) and batch:
        first = batch[0]
        return _batch_len(first) if hasattr(first, "shape") else len(batch)
    return 1
