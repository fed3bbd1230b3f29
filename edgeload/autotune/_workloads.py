"""What autotune measures: a workload builds the real loader for one configuration.

A workload knows its plan arguments, which knobs apply to it, how many bytes one batch
takes, how to check its input before any trial, and how to open the loader for a
configuration as an iterator of ``(items, latencies_ms)``.  :func:`measure` runs one
trial around that iterator: warm-up, then a timed window with the process tree's peak
PSS and CPU time.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Protocol, Sequence, Tuple

from ..errors import EdgeloadError, SourceError
from ..measure import PeakPss, percentile, tree_cpu_seconds

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
        return factory()
    except Exception as exc:
        raise SourceError(
            f"--dataset {spec!r}: {attr}() raised {type(exc).__name__}: {exc}", source=spec
        ) from exc


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
