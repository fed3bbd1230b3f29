"""What autotune measures: a workload builds the real loader for one configuration.

A workload knows its plan arguments, which knobs apply to it, how many bytes one batch
takes, how to check its input before any trial, and how to open the loader for a
configuration as an iterator of ``(items, latencies_ms)``.  :func:`measure` runs one
trial around that iterator: warm-up, then a timed window with the process tree's peak
PSS and CPU time.  The two real workloads are :class:`VideoWorkload` (video streams)
and :class:`DatasetWorkload` (a dataset).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Protocol, Sequence, Tuple

from .._deps import require_torch
from ..errors import EdgeloadError, SourceError
from ..measure import PeakPss, percentile, tree_cpu_seconds
from ..platform.probe import probe
from ..platform.profile import load_profile

# typing's generics: this alias is evaluated at import, and Python 3.8 has no `X | Y`
Batches = Iterator[Tuple[int, Optional[Sequence[float]]]]


@dataclass(frozen=True)
class Measurement:
    """What one trial measured, over its timed window (warm-up excluded, except memory)."""

    items: int
    """Frames (video) or samples (dataset) delivered in the window."""
    seconds: float
    items_per_s: float
    latency_p50_ms: float
    """Frame age (video) or wait for the next batch (dataset), median, milliseconds."""
    latency_p99_ms: float
    peak_pss_bytes: int
    """Peak PSS of the whole process tree, warm-up included (slots are allocated then)."""
    cpu_percent: float
    """CPU time of the process tree over wall time; 100 = one core busy."""
    peak_own_bytes: int
    """Peak of that PSS's anonymous and shared-memory part, warm-up included: what the
    ceiling and the memory tie-break read (``edgeload.measure``: library pages' PSS moves
    with other processes)."""


class Workload(Protocol):
    """A loader to tune: see the module docstring."""

    kind: str
    """``"video"`` or ``"dataset"``."""
    name: str
    batch: int
    """The batch size asked for (the start of the batch-size knob)."""
    knob_names: tuple[str, ...]

    def check(self) -> None:
        """Raise an EdgeloadError naming the input if it cannot be used."""

    def plan_args(self, batch: int) -> dict[str, Any]:
        """Keyword arguments of :func:`edgeload.platform.plan.plan_for` describing the workload."""

    def batch_bytes(self, batch: int) -> int:
        """Bytes of one batch of ``batch`` items."""

    def open(self, config: Mapping[str, Any]) -> contextlib.AbstractContextManager[Batches]:
        """The loader built for ``config``, as batches of ``(items, latencies_ms)``."""


def measure(
    workload: Workload, config: Mapping[str, Any], *, warmup_s: float, trial_s: float
) -> Measurement:
    """Run one trial: open, warm up for ``warmup_s``, measure for ``trial_s``, close."""
    latencies: list[float] = []
    items = 0
    with PeakPss() as mem, workload.open(config) as batches:
        start = time.monotonic()
        warm_until = start + warmup_s
        began = cpu0 = None
        while True:
            asked = time.monotonic()
            try:
                count, ages = next(batches)
            except StopIteration:
                break
            now = time.monotonic()
            if now < warm_until:
                continue
            if began is None:  # the first batch after warm-up opens the window
                began, cpu0 = now, tree_cpu_seconds()
                continue
            items += count
            latencies.extend(ages if ages is not None else [(now - asked) * 1000.0])
            if now - began >= trial_s:
                break
        seconds = time.monotonic() - began if began is not None else 0.0
        cpu = tree_cpu_seconds() - cpu0 if cpu0 is not None else 0.0
    if seconds <= 0 or items == 0:
        raise EdgeloadError(
            f"{workload.name}: no items arrived in {warmup_s + trial_s:.1f} s; "
            "check the input, or raise --trial-seconds"
        )
    return Measurement(
        items=items,
        seconds=seconds,
        items_per_s=items / seconds,
        latency_p50_ms=percentile(latencies, 50),
        latency_p99_ms=percentile(latencies, 99),
        peak_pss_bytes=mem.peak_bytes,
        cpu_percent=100.0 * cpu / seconds,
        peak_own_bytes=mem.peak_own_bytes,
    )


def profile_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """A configuration as ``[profile]`` keys (a prefetch budget pins min and max)."""
    out = {k: v for k, v in config.items() if k != "prefetch_bytes"}
    if "prefetch_bytes" in config:
        out["prefetch_min_bytes"] = out["prefetch_max_bytes"] = int(config["prefetch_bytes"])
    return out


def load_factory(spec: str) -> Any:
    """Import ``module:factory`` and call it with no arguments; return the dataset.

    Raises:
        SourceError: the module or factory cannot be imported or called.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise SourceError(
            f"--dataset {spec!r}: expected module:factory, such as mypkg.data:make_dataset",
            source=spec,
        )
    if os.getcwd() not in sys.path:  # like `python -m`, the current directory imports
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise SourceError(
            f"--dataset {spec!r}: cannot import module {module_name!r} ({exc}); "
            "check the name and that it is on PYTHONPATH",
            source=spec,
        ) from exc
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise SourceError(
            f"--dataset {spec!r}: module {module_name!r} has no callable {attr!r}",
            source=spec,
        )
    try:
        dataset = factory()
    except Exception as exc:
        raise SourceError(
            f"--dataset {spec!r}: {attr}() raised {type(exc).__name__}: {exc}", source=spec
        ) from exc
    map_style = hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")
    if dataset is None or not (map_style or hasattr(dataset, "__iter__")):
        got = "None" if dataset is None else f"{dataset!r:.60} (type {type(dataset).__name__})"
        raise SourceError(
            f"--dataset {spec!r}: {attr}() returned {got}, not a dataset; make it return "
            "the dataset (a torch Dataset with __len__ and __getitem__, or an IterableDataset)",
            source=spec,
        )
    return dataset


def sample_bytes(sample: Any) -> int:
    """Bytes of one sample: arrays and tensors by their buffers, containers summed."""
    if hasattr(sample, "nbytes") and isinstance(sample.nbytes, int):
        return int(sample.nbytes)
    if hasattr(sample, "element_size") and hasattr(sample, "nelement"):
        return int(sample.element_size() * sample.nelement())
    if isinstance(sample, (bytes, bytearray, memoryview)):
        return len(sample)
    if isinstance(sample, Mapping):
        return sum(sample_bytes(v) for v in sample.values())
    if isinstance(sample, (list, tuple)):
        return sum(sample_bytes(v) for v in sample)
    return 8  # a number or another small scalar


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
