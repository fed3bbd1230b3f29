"""Where a scale run's memory is, and what N plain OpenCV captures cost without a loader.

The tree's peak PSS (what ``run_child`` samples) includes the shared libraries' pages,
whose PSS share moves as other processes that map cv2, FFmpeg or torch come and go:
on a shared box that is tens of MiB of noise between two runs.  The kinds below split
the process's own PSS so the growth per added stream can be read per kind:

- ``anon``: private anonymous memory: FFmpeg's frame pool and per-thread contexts,
  OpenCV's converted BGR frame, the reader's decode buffer, malloc's heap, thread stacks;
- ``slots``: the batch slots (``mmap`` shared anonymous memory, ``/dev/zero``), the
  part touched so far;
- ``file``: file-backed pages (libraries, the clips), the noisy part.
"""

from __future__ import annotations

import time
from typing import Any

# smaps_rollup's PSS lines (Linux >= 5.0) and the kind each is reported as.
_ROLLUP_KINDS = {"Pss_Anon": "anon", "Pss_Shmem": "slots", "Pss_File": "file"}


def memory_by_kind() -> dict[str, float]:
    """This process's PSS in MiB by kind (see the module docstring); empty where the
    kernel has no ``/proc/self/smaps_rollup`` split."""
    from edgeload.measure import smaps_pss

    rollup = smaps_pss()
    return {kind: rollup[key] / 2**20 for key, kind in _ROLLUP_KINDS.items() if key in rollup}


def bare_captures(paths: list[str], n: int, seconds: float, ffmpeg_threads: int) -> dict[str, Any]:
    """N looping captures read in turn by one thread, each into its own BGR buffer
    (``cap.read(image=buf)``): the memory floor of N streams, with no loader.

    Returns frames, span, CPU seconds, OS threads and :func:`memory_by_kind` taken at
    the end of the span, with the captures still open.
    """
    import cv2

    from benchmarks._common import cpu_s, os_threads

    params = [cv2.CAP_PROP_N_THREADS, ffmpeg_threads] if ffmpeg_threads > 0 else []
    caps = [cv2.VideoCapture(paths[i % len(paths)], cv2.CAP_FFMPEG, params) for i in range(n)]
    bufs: list[Any] = [None] * n
    counts = [0] * n
    warm_until = time.monotonic() + 1.0
    start = cpu0 = None
    while True:
        now = time.monotonic()
        if start is None and now >= warm_until:
            start, cpu0 = now, cpu_s()
        if start is not None and now - start >= seconds:
            break
        for i, cap in enumerate(caps):
            ok, img = cap.read(image=bufs[i]) if bufs[i] is not None else cap.read()
            if not ok:
                cap.set(cv2.CAP_PROP_POS_FRAMES, 0)
                continue
            bufs[i] = img
            if start is not None:
                counts[i] += 1
    span, cpu = time.monotonic() - (start or 0.0), cpu_s() - (cpu0 or 0.0)
    memory, threads = memory_by_kind(), os_threads()
    for cap in caps:
        cap.release()
    return {"n": n, "frames": sum(counts), "span_s": span, "cpu_s": cpu,
            "rates": [c / span for c in counts], "plan": "plain OpenCV captures, no loader",
            "ffmpeg_threads": ffmpeg_threads, "threads": threads, "memory": memory}  # fmt: skip
