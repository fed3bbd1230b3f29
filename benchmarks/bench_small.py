"""Small frames: 4 looping 320x240 files -> batches of 4 x 160x160, StreamLoader vs a plain loop.

At this size a frame's decode and resize take well under a millisecond, so whatever
the loader adds per frame (thread hand-offs, FFmpeg frame threads, wake-ups) shows.

Contenders, each in a fresh process with torch and cv2 imported, interleaved in rounds:

- ``plain``: one loop, ``cap.read()`` from each file in turn (OpenCV's default FFmpeg
  threads), ``cv2.resize`` into a preallocated batch, ``torch.from_numpy``.
- ``edgeload``: ``StreamLoader(files, size=(160, 160), batch=4)`` with the plan.
- ``edgeload-ffN``: the same with N FFmpeg threads per stream instead of the plan's
  (0: FFmpeg's own choice); a benchmark-only override, to measure the plan's choice.
  These files are small enough that each capture opens with one thread whenever N is
  more than one (``SMALL_FILE_PIXELS`` in ``edgeload/video/_capture.py``); the report's
  ``stream_ffmpeg_threads`` says what each stream ran.

Per contender: frames/s and CPU ms per frame over ``--seconds`` after a 1 s warm-up.

Run: ``flock /tmp/cpu.lock python scripts/bench.py small [--rounds 3] [--out r.json]``.
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
    plain_batches,
    plan_ffmpeg_threads,
    run_child,
    versions,
)
from benchmarks._common import main as bench_main

CONTENDERS = ("plain", "edgeload", "edgeload-ff1", "edgeload-ff0")
IN, OUT = (320, 240), (160, 160)
_WARMUP_S = 1.0
_TIMEOUT_S = 120


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The benchmark's options (shared with ``scripts/bench.py small``)."""
    parser.add_argument("--contenders", nargs="+", default=["plain", "edgeload"],
                        help=f"from {', '.join(CONTENDERS)} (edgeload-ffN for any N)")  # fmt: skip
    parser.add_argument("--seconds", type=float, default=5.0, help="measured, per run")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median)")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache/edgeload/bench")
    parser.add_argument("--out", help="write the results as JSON here")


def _edgeload(paths: list[str], ffmpeg_threads: int | None, info: dict[str, Any]) -> Any:
    from edgeload.video import StreamLoader, VideoSource

    sources = [VideoSource(p, loop=True) for p in paths]
    override = plan_ffmpeg_threads(ffmpeg_threads) if ffmpeg_threads is not None else None
    with override or contextlib.nullcontext():
        loader = StreamLoader(sources, size=OUT, batch=4)
    info["ffmpeg_threads"] = loader.plan.threads.ffmpeg
    with loader:
        for i, batch in enumerate(loader):
            if i == 10:
                info["os_threads"] = os_threads()
                # What each capture opened with: a small file gets 1 whatever the plan says
                streams = loader.stats()["streams"]
                info["stream_ffmpeg_threads"] = [s.get("ffmpeg_threads") for s in streams]
            yield int(batch.valid.sum()), batch.frames


def _child(args: argparse.Namespace) -> dict[str, Any]:
    import cv2  # noqa: F401  (as in the user's program: the memory baselines match)
    import torch  # noqa: F401

    name, info = args.child, {}  # type: ignore[var-annotated]
    if name == "plain":
        batches = ((len(args.paths), b) for b in plain_batches(args.paths, OUT))
    else:
        ff = name.partition("-ff")[2]
        batches = _edgeload(args.paths, int(ff) if ff else None, info)
    frames, start, cpu0 = 0, None, 0.0
    warm_until = time.monotonic() + _WARMUP_S
    for n, _ in batches:
        now = time.monotonic()
        if start is None:
            if now >= warm_until:
                start, cpu0 = now, cpu_s()
            continue
        frames += n
        if now - start >= args.seconds:
            break
    span = time.monotonic() - (start or 0.0)
    batches.close()  # the loader's threads stop here, outside the measured span
    return {"frames": frames, "span_s": span, "cpu_s": cpu_s() - cpu0, **info}


def run(args: argparse.Namespace) -> int:
    """Run the contenders in interleaved rounds; print and save medians and ratios."""
    from benchmarks.bench_video import make_clips

    paths = make_clips(args.cache, size=IN, seconds=4.0)

    def run_one(name: str, _round: int) -> dict[str, Any]:
        cmd = [sys.executable, os.path.abspath(__file__), "--child", name,
               "--seconds", str(args.seconds), *map(str, paths)]  # fmt: skip
        r = run_child(cmd, timeout_s=_TIMEOUT_S)
        print(f"{name:>14}: {r['frames'] / r['span_s']:7.1f} frames/s  CPU "
              f"{1000 * r['cpu_s'] / r['frames']:5.3f} ms/frame  PSS "
              f"{r['peak_pss_mib']:5.0f} MiB", flush=True)  # fmt: skip
        return r

    load_before = os.getloadavg()
    runs, orders = interleave(args.contenders, args.rounds, run_one)
    report: dict[str, Any] = {
        "workload": f"4 looping {IN[0]}x{IN[1]} H.264 files -> batches of 4 x "
        f"{OUT[0]}x{OUT[1]}, {args.seconds:g} s after {_WARMUP_S:g} s warm-up",
        "cpus": os.cpu_count(), "load_avg_before": load_before,
        "load_avg": os.getloadavg(), "versions": versions(), "round_orders": orders,
        "results": {},
    }  # fmt: skip
    res = report["results"]
    for name, rs in runs.items():
        fps = [r["frames"] / r["span_s"] for r in rs]
        res[name] = {
            "fps": statistics.median(fps),
            "fps_runs": [round(f) for f in fps],
            "cpu_ms_per_frame": statistics.median(1000 * r["cpu_s"] / r["frames"] for r in rs),
            "cpu_ms_per_frame_runs": [round(1000 * r["cpu_s"] / r["frames"], 3) for r in rs],
            "peak_pss_mib": statistics.median(r["peak_pss_mib"] for r in rs),
            "ffmpeg_threads": rs[0].get("ffmpeg_threads"),
            "stream_ffmpeg_threads": rs[0].get("stream_ffmpeg_threads"),
        }
    if "plain" in res:
        for name, m in res.items():
            # Per round, then the median: the rounds' load drifts hit both sides alike.
            m["vs_plain"] = statistics.median(
                (a["frames"] / a["span_s"]) / (b["frames"] / b["span_s"])
                for a, b in zip(runs[name], runs["plain"])
            )
            m["cpu_vs_plain"] = statistics.median(
                (a["cpu_s"] / a["frames"]) / (b["cpu_s"] / b["frames"])
                for a, b in zip(runs[name], runs["plain"])
            )
    return finish(report, args.out)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (``--child`` runs one contender)."""
    return bench_main(argv, doc=__doc__ or "", add_arguments=add_arguments, run=run,
                      child=_child, hidden=[("paths", {"nargs": "*"})])  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
