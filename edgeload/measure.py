"""Measuring what a loader costs: PSS of the whole process tree, CPU time, percentiles.

PSS (proportional set size) counts a page shared by k processes as 1/k in each, so the
sum over a process tree is what the tree really costs; RSS double-counts pages shared
with worker processes (torch, shared-memory slots).  Used by ``edgeload autotune`` and
by the benchmarks.

Of that PSS, the tree's *own* memory is the anonymous and shared-memory part (heaps,
arenas, slots, what workers copied): what its work allocated, and what cannot be
dropped and read back from a file under pressure.  The rest is file-backed (libraries),
and its PSS moves with every other process that maps the same files: one more process
importing a CUDA build of torch (260 MiB of resident library pages) takes tens of MiB
off this tree's PSS.  Decisions that compare one configuration with another
(``edgeload autotune``) read the own part.
"""

from __future__ import annotations

import math
import os
import subprocess
import threading
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import ContextManager, TypeVar

import psutil

# How often the peak sampler reads /proc; smaller costs CPU on a small board.
SAMPLE_INTERVAL_S = 0.05

S = TypeVar("S")


def _tree(pid: int | None) -> list[psutil.Process]:
    """A process and its descendants; empty when it is gone."""
    try:
        root = psutil.Process(pid or os.getpid())
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def smaps_pss(pid: int | str = "self") -> dict[str, int]:
    """The PSS lines of ``/proc/PID/smaps_rollup`` in bytes, by name (``Pss``, and from
    Linux 5.0 ``Pss_Anon``, ``Pss_File``, ``Pss_Shmem``); empty where it cannot be read
    (the process exited, or the kernel has no such file)."""
    fields: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key.startswith("Pss"):
                    fields[key] = int(rest.split()[0]) * 1024
    except (OSError, ValueError):
        return {}
    return fields


def _process_memory(proc: psutil.Process) -> tuple[int, int]:
    """(PSS, own) of one process in bytes; own is all of its PSS where the kernel does not
    split it, and both are its RSS where PSS is unreadable; (0, 0) once it has exited."""
    fields = smaps_pss(proc.pid)
    if "Pss" in fields:
        own = fields.get("Pss_Anon", fields["Pss"]) + fields.get("Pss_Shmem", 0)
        return fields["Pss"], own
    try:
        pss = int(proc.memory_full_info().pss)
    except (psutil.Error, AttributeError):
        try:
            pss = int(proc.memory_info().rss)
        except psutil.Error:
            return 0, 0  # it exited between listing and reading
    return pss, pss


def tree_memory(pid: int | None = None) -> tuple[int, int]:
    """(PSS, own memory) of a process and all its descendants, bytes (see the module).

    Args:
        pid: the root process; default this process.
    """
    total = own = 0
    for proc in _tree(pid):
        pss, mine = _process_memory(proc)
        total += pss
        own += mine
    return total, own


def tree_pss_bytes(pid: int | None = None) -> int:
    """PSS of a process and all its descendants, bytes (RSS where PSS is unreadable).

    Args:
        pid: the root process; default this process.
    """
    return tree_memory(pid)[0]


def tree_own_bytes(pid: int | None = None) -> int:
    """The anonymous and shared-memory PSS of a process and its descendants, bytes: the
    part other processes mapping the same libraries do not move (see the module).

    Args:
        pid: the root process; default this process.
    """
    return tree_memory(pid)[1]


def tree_cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU seconds of a process and its live descendants (children's
    reaped time included)."""
    total = 0.0
    for proc in _tree(pid):
        try:
            t = proc.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            continue
    return total


def run_measured(
    cmd: Sequence[str], *, timeout_s: float, interval_s: float = SAMPLE_INTERVAL_S
) -> tuple[str, int]:
    """Run ``cmd`` while sampling its process tree's PSS every ``interval_s``; return
    (stdout, peak bytes).

    Each benchmark mode runs this way, alone in a fresh process, so its memory is its own.
    Reading a process's PSS walks its page tables under its memory-map lock, which its
    own ``mmap``/``munmap`` then wait for: a benchmark whose figure is a model's speed
    samples seldom (a second), so the sampling does not slow what it measures.

    Raises:
        RuntimeError: the command exited non-zero (its stderr went to ours).
        subprocess.TimeoutExpired: it ran past ``timeout_s`` (it is killed first).
    """
    out, mem = run_sampled(
        cmd, timeout_s=timeout_s, sampler=lambda pid: PeakPss(pid, interval_s=interval_s)
    )
    return out, mem.peak_bytes


def run_sampled(
    cmd: Sequence[str], *, timeout_s: float, sampler: Callable[[int], ContextManager[S]]
) -> tuple[str, S]:
    """Run ``cmd`` inside ``sampler(pid)`` (e.g. :class:`PeakPss`, or a sampler that
    also reads another figure); return (stdout, what the sampler's ``with`` gave).

    Raises: as :func:`run_measured`.
    """
    proc = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, text=True)
    try:
        with sampler(proc.pid) as mem:
            out, _ = proc.communicate(timeout=timeout_s)
    except BaseException:
        proc.kill()
        proc.communicate()
        raise
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... failed with exit code {proc.returncode}")
    return out, mem


class PeakPss:
    """Sample the tree's PSS in a background thread; ``peak_bytes`` (PSS) and
    ``peak_own_bytes`` (its anonymous and shared-memory part) after exit.

    Use as a context manager around the work to measure::

        with PeakPss() as mem:
            run()
        print(mem.peak_bytes, mem.peak_own_bytes)
    """

    def __init__(self, pid: int | None = None, *, interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self.pid = pid or os.getpid()
        self.interval_s = interval_s
        self.peak_bytes = 0
        self.peak_own_bytes = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> int:
        """Take one sample now and return its PSS."""
        value, own = tree_memory(self.pid)
        self.peak_bytes = max(self.peak_bytes, value)
        self.peak_own_bytes = max(self.peak_own_bytes, own)
        self.samples += 1
        return value

    def __enter__(self) -> PeakPss:
        self.sample()
        self._thread = threading.Thread(target=self._run, name="edgeload-pss", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        self.sample()


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by linear interpolation; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)
