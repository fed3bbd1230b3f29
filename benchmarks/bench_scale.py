"""Scale: one StreamLoader with 1, 4, 8, 16 and 32 streams (what an AGX Orin runs).

Workload: ``N`` looping 640x360 H.264 files (four lavfi patterns, 4 s at 30 fps, made
once into ``--cache``) read as fast as they decode, ``policy="every"``, one place per
stream, ``--size`` output, for ``--seconds`` after a 1 s warm-up.  Each N runs in a
fresh process (peak PSS of its tree sampled from outside), N interleaved in rounds.

Per N: frames/s, CPU ms per frame (process CPU over frames), peak PSS and its growth
per added stream, the process's own PSS by kind at the end of the span (anonymous,
slots, file-backed: :mod:`benchmarks._scale_memory`) and its growth per added stream,
and min/max of the per-stream frame rates (1.0: no stream starved).  ``--bare`` adds,
per N, N plain OpenCV captures read in turn by one thread with one FFmpeg thread each:
the memory and CPU floor of N streams without a loader.

Run: ``flock /tmp/cpu.lock python scripts/bench.py scale [--rounds 2] [--out r.json]``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks._common import (
    cpu_s,
    finish,
    interleave,
    os_threads,
    plan_ffmpeg_threads,
    run_child,
    versions,
)
from benchmarks._common import main as bench_main
from benchmarks._scale_memory import bare_captures, memory_by_kind

_TIMEOUT_S = 180
# The ``--ffmpeg-threads`` value that stands for ``--bare``'s plain captures.
BARE = -2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The benchmark's options (shared with ``scripts/bench.py scale``)."""
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 4, 8, 16, 32])
    parser.add_argument("--size", type=int, nargs=2, default=[320, 320], help="output W H")
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--consumer-ms", type=float, default=0.0,
                        help="the consumer's time per batch (a model slower than decode "
                        "fills the prefetch queue: what the slots cost then)")  # fmt: skip
    parser.add_argument("--ffmpeg-threads", type=int, nargs="+", default=[-1],
                        help="FFmpeg threads per stream to compare (-1: the plan's; "
                        "0: FFmpeg's own); each N runs with each")  # fmt: skip
    parser.add_argument("--bframes", type=int, default=None,
                        help="B-frames in the clips (default: x264's preset, 3; 0 is what an "
                        "IP camera sends, and FFmpeg's decoder then keeps fewer frames)")  # fmt: skip
    parser.add_argument("--bare", action="store_true",
                        help="also run N plain OpenCV captures (no loader) per N")  # fmt: skip
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache/edgeload/bench")
    parser.add_argument("--out", help="write the results as JSON here")


def _child(args: argparse.Namespace) -> dict[str, Any]:
    import cv2  # noqa: F401  (as in the user's program: the memory baselines match)
    import torch  # noqa: F401

    from edgeload.video import StreamLoader, VideoSource

    paths, n, size, seconds = args.paths, int(args.child), tuple(args.size), args.seconds
    if args.ffmpeg_threads[0] == BARE:
        return bare_captures(paths, n, seconds, ffmpeg_threads=1)
    sources = [VideoSource(paths[i % len(paths)], loop=True) for i in range(n)]
    counts = [0] * n
    ff = args.ffmpeg_threads[0]
    with plan_ffmpeg_threads(ff) if ff >= 0 else contextlib.nullcontext():
        loader = StreamLoader(sources, size=size, policy="every")
    with loader:
        warm_until = time.monotonic() + 1.0
        cpu0 = start = None
        for batch in loader:
            now = time.monotonic()
            if start is None and now >= warm_until:
                cpu0, start = cpu_s(), now
            if args.consumer_ms:
                time.sleep(args.consumer_ms / 1000)
            if start is not None:
                for m in batch.meta:
                    if m is not None:
                        counts[m.stream_id] += 1
                if now - start >= seconds:
                    break
        cpu, span = cpu_s() - (cpu0 or 0.0), time.monotonic() - (start or 0.0)
        plan, ffmpeg = loader.plan.describe(), loader.plan.threads.ffmpeg
        threads, memory = os_threads(), memory_by_kind()
    frames = sum(counts)
    return {"n": n, "frames": frames, "span_s": span, "cpu_s": cpu,
            "rates": [c / span for c in counts], "plan": plan, "ffmpeg_threads": ffmpeg,
            "threads": threads, "memory": memory}  # fmt: skip


def _run_child(paths: list[Path], n: int, ff: int, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", str(n), "--seconds",
           str(args.seconds), "--size", *map(str, args.size), "--ffmpeg-threads", str(ff),
           "--consumer-ms", str(args.consumer_ms),
           "--", *map(str, paths)]  # fmt: skip
    return run_child(cmd, timeout_s=_TIMEOUT_S)


def _summary(rs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "fps": statistics.median(r["frames"] / r["span_s"] for r in rs),
        "cpu_ms_per_frame": statistics.median(1000 * r["cpu_s"] / r["frames"] for r in rs),
        "peak_pss_mib": statistics.median(r["peak_pss_mib"] for r in rs),
        "min_max_rate": statistics.median(min(r["rates"]) / max(r["rates"]) for r in rs),
        "threads": rs[0]["threads"],
        "pss_by_kind_mib": {
            kind: statistics.median(r["memory"][kind] for r in rs) for kind in rs[0]["memory"]
        },
        "plan": rs[0]["plan"],
    }


def _key(n: int, ff: int) -> str | int:
    """A result's key: N alone for the plan's threads (as before), else ``N@bare`` or
    ``N@ffmpegK``."""
    if ff == BARE:
        return f"{n}@bare"
    return n if ff < 0 else f"{n}@ffmpeg{ff}"


def _add_growth(res: dict[int, dict[str, Any]]) -> None:
    """Per N: PSS growth per stream added since the previous N (peak PSS of the tree,
    and the process's own PSS by kind), and CPU per frame against 4 streams'."""
    ns = sorted(res)
    for a, b in zip(ns, ns[1:]):
        ra, rb = res[a], res[b]
        rb["pss_mib_per_added_stream"] = (rb["peak_pss_mib"] - ra["peak_pss_mib"]) / (b - a)
        rb["pss_by_kind_mib_per_added_stream"] = {
            kind: (mib - ra["pss_by_kind_mib"].get(kind, 0.0)) / (b - a)
            for kind, mib in rb["pss_by_kind_mib"].items()
        }
    if 4 in res:
        for r in res.values():
            r["cpu_per_frame_vs_4_streams"] = r["cpu_ms_per_frame"] / res[4]["cpu_ms_per_frame"]


def run(args: argparse.Namespace) -> int:
    """Run each stream count in interleaved rounds; print and save the medians."""
    from benchmarks.bench_video import make_clips

    paths = make_clips(args.cache, size=(640, 360), seconds=4.0, bframes=args.bframes)

    def run_one(key: tuple[int, int], _round: int) -> dict[str, Any]:
        ff, n = key
        r = _run_child(paths, n, ff, args)
        print(f"{n:>3} streams, ffmpeg {r['ffmpeg_threads']}: "
              f"{r['frames'] / r['span_s']:7.1f} frames/s  CPU "
              f"{1000 * r['cpu_s'] / r['frames']:5.2f} ms/frame  PSS "
              f"{r['peak_pss_mib']:6.0f} MiB  min/max rate "
              f"{min(r['rates']) / max(r['rates']):.2f}", flush=True)  # fmt: skip
        return r

    load_before = os.getloadavg()
    # Each round's order rotated: going first in a round is slowest on this box.
    contenders = [*args.ffmpeg_threads, *([BARE] if args.bare else [])]
    keys = [(ff, n) for n in args.streams for ff in contenders]
    runs, orders = interleave(keys, args.rounds, run_one, label=lambda k: str(_key(k[1], k[0])))
    w, h = args.size
    report: dict[str, Any] = {
        "workload": f"N looping 640x360 H.264 files ("
        f"{'x264 veryfast B-frames' if args.bframes is None else f'{args.bframes} B-frames'}) "
        f"-> {w}x{h}, policy every, one place "
        f"per stream, {args.seconds:g} s after 1 s warm-up, consumer {args.consumer_ms:g} ms "
        "per batch",
        "cpus": os.cpu_count(), "load_avg_before": load_before, "load_avg": os.getloadavg(),
        "versions": versions(), "round_orders": orders, "slot_place_mib": w * h * 3 / 2**20, "results": {},
    }  # fmt: skip
    for ff in contenders:
        res = {n: _summary(rs) for (f, n), rs in sorted(runs.items()) if f == ff and rs}
        _add_growth(res)
        for n, summary in res.items():
            report["results"][_key(n, ff)] = summary
    return finish(report, args.out)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (``--child N`` runs one stream count)."""
    return bench_main(argv, doc=__doc__ or "", add_arguments=add_arguments, run=run,
                      child=_child, hidden=[("paths", {"nargs": "*"})])  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
