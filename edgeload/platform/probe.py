"""What this device is: read once from a root path, returned as frozen data.

``probe(root)`` reads only files under ``root`` (``proc/cpuinfo``, ``etc/nv_tegra_release``,
the device tree, ``sys/devices/system/cpu``, cgroup files ...), so tests point it at a
fixture tree. Only a live probe (``root="/"``) also asks the running process: CPU
affinity, torch's CUDA device and OpenCV's build. Nothing here makes decisions; a
missing or garbled file turns the facts it would give into ``None`` (or ``"unknown"``)
and a line in :attr:`Platform.notes`, never an exception.
"""

from __future__ import annotations

import functools
import os
from typing import Protocol, cast

from ._collect import collect
from .facts import CpuCluster, CpuInfo, GpuInfo, MemoryInfo, OpenCVInfo, PiRevision, Platform

__all__ = [
    "CpuCluster",
    "CpuInfo",
    "GpuInfo",
    "MemoryInfo",
    "OpenCVInfo",
    "PiRevision",
    "Platform",
    "probe",
]


class _ProbeFunction(Protocol):
    """``probe``'s type: the function plus ``cache_clear()`` for the cached live result."""

    def __call__(
        self, root: str | os.PathLike[str] = "/", *, live: bool | None = None
    ) -> Platform: ...

    def cache_clear(self) -> None: ...


def _probe(root: str | os.PathLike[str] = "/", *, live: bool | None = None) -> Platform:
    """Read what this device is.

    Args:
        root: filesystem root to read ``proc/``, ``sys/``, ``etc/`` from; a fixture tree
            in tests. Default ``"/"``.
        live: also ask the running process (affinity, torch CUDA, cv2). Defaults to
            ``root == "/"``. Live results are cached; ``probe.cache_clear()`` forgets them.

    Raises:
        PlatformError: ``root`` is not a directory. Missing or garbled files under it
            never raise; they leave the facts unknown and add a line to ``notes``.
    """
    root_str = os.fspath(root)
    if live is None:
        live = os.path.realpath(root_str) == os.path.realpath("/")
    if live:
        return _probe_cached(root_str)
    return _probe_uncached(root_str, live=False)


@functools.lru_cache(maxsize=4)
def _probe_cached(root: str) -> Platform:
    return _probe_uncached(root, live=True)


def _probe_uncached(root: str, *, live: bool) -> Platform:
    return collect(root, live=live)


_probe.cache_clear = _probe_cached.cache_clear  # type: ignore[attr-defined]
_probe.__name__ = _probe.__qualname__ = "probe"
probe = cast("_ProbeFunction", _probe)
