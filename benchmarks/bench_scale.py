"""Scale: one StreamLoader with 1, 4, 8, 16 and 32 streams (what an AGX Orin runs).

Workload: ``N`` looping 640x360 H.264 files (four lavfi patterns, 4 s at 30 fps, made
once into ``--cache``) read as fast as they decode, ``policy="every"``, one place per
stream, ``--size`` output, for ``--seconds`` after a 1 s warm-up.  Each N runs in a
fresh process (peak PSS of its tree sampled from outside), N interleaved in rounds.

Per N: frames/s, CPU ms per frame (process CPU over frames), peak PSS and its growth
per added stream, and min/max of the per-stream frame rates (1.0: no stream starved).

Run: ``flock /tmp/cpu.lock python scripts/bench.py scale [--rounds 2] [--out r.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

_TIMEOUT_S = 180


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The benchmark's options (shared with ``scripts/bench.py scale``)."""
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 4, 8, 16, 32])
    parser.add_argument("--size", type=int, nargs=2, default=[320, 320], help="output W H")
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache/edgeload/bench")
    parser.add_argument("--out", help="write the results as JSON here")


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _child(paths: list[str], n: int, size: tuple[int, int], seconds: float) -> dict[str, Any]:
    import cv2  # noqa: F401  (as in the user's program: the memory baselines match)
    import torch  # noqa: F401

    from edgeload.video import StreamLoader, VideoSource

    sources = [VideoSource(paths[i % len(paths)], loop=True) for i in range(n)]
    counts = [0] * n
    with StreamLoader(sources, size=size, policy="every") as loader:
        warm_until = time.monotonic() + 1.0
        cpu0 = start = None
        for batch in loader:
            now = time.monotonic()
            if start is None and now >= warm_until:
                cpu0, start = _cpu_s(), now
            if start is not None:
                for m in batch.meta:
                    if m is not None:
                        counts[m.stream_id] += 1
                if now - start >= seconds:
                    break
        cpu, span = _cpu_s() - (cpu0 or 0.0), time.monotonic() - (start or 0.0)
        plan = loader.plan.describe()
    frames = sum(counts)
    return {"n": n, "frames": frames, "span_s": span, "cpu_s": cpu,
            "rates": [c / span for c in counts], "plan": plan}  # fmt: skip


def _run_child(paths: list[Path], n: int, args: argparse.Namespace) -> dict[str, Any]:
    from edgeload.measure import run_measured

    cmd = [sys.executable, os.path.abspath(__file__), "--child", str(n), "--seconds",
           str(args.seconds), "--size", *map(str, args.size), *map(str, paths)]  # fmt: skip
    out, peak = run_measured(cmd, timeout_s=_TIMEOUT_S)
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    result["peak_pss_mib"] = peak / 2**20
    return result


def run(args: argparse.Namespace) -> int:
    """Run each stream count in interleaved rounds; print and save the medians."""
    from benchmarks.bench_video import make_clips

    paths = make_clips(args.cache, size=(640, 360), seconds=4.0)
    runs: dict[int, list[dict[str, Any]]] = {n: [] for n in args.streams}
    for _ in range(args.rounds):
        for n in args.streams:
            r = _run_child(paths, n, args)
            runs[n].append(r)
            print(f"{n:>3} streams: {r['frames'] / r['span_s']:7.1f} frames/s  CPU "
                  f"{1000 * r['cpu_s'] / r['frames']:5.2f} ms/frame  PSS "
                  f"{r['peak_pss_mib']:6.0f} MiB  min/max rate "
                  f"{min(r['rates']) / max(r['rates']):.2f}", flush=True)  # fmt: skip
    w, h = args.size
    report: dict[str, Any] = {
        "workload": f"N looping 640x360 H.264 files -> {w}x{h}, policy every, one place "
        f"per stream, {args.seconds:g} s after 1 s warm-up",
        "cpus": os.cpu_count(), "slot_place_mib": w * h * 3 / 2**20, "results": {},
    }  # fmt: skip
    for n, rs in runs.items():
        report["results"][n] = {
            "fps": statistics.median(r["frames"] / r["span_s"] for r in rs),
            "cpu_ms_per_frame": statistics.median(1000 * r["cpu_s"] / r["frames"] for r in rs),
            "peak_pss_mib": statistics.median(r["peak_pss_mib"] for r in rs),
            "min_max_rate": statistics.median(min(r["rates"]) / max(r["rates"]) for r in rs),
            "plan": rs[0]["plan"],
        }
    res = report["results"]
    ns = sorted(res)
    for a, b in zip(ns, ns[1:]):
        res[b]["pss_mib_per_added_stream"] = (res[b]["peak_pss_mib"] - res[a]["peak_pss_mib"]) / (
            b - a
        )
    print(json.dumps(report, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("paths", nargs="*", help=argparse.SUPPRESS)
    add_arguments(parser)
    args = parser.parse_args(argv)
    if args.child:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        print(json.dumps(_child(args.paths, args.child, tuple(args.size), args.seconds)))
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
