#!/usr/bin/env python3
"""edgeload benchmarks, one subcommand per area: ``python scripts/bench.py handoff``.

Each subcommand measures edgeload against the peers a user would otherwise pick, in
one run, and prints medians and ratios (``--json`` for a machine). To add an area,
put a module in ``benchmarks/`` with ``add_arguments(parser)`` and ``run(args)`` and
name it in ``MODULES``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # for benchmarks.*, also in spawned workers


def add_handoff(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "handoff",
        help="hand-off cost per item: edgeload thread/process slots vs torch DataLoader",
    )
    p.add_argument("--sizes-mib", type=int, nargs="+", default=[1, 8], help="item sizes")
    p.add_argument("--items", type=int, default=100, help="items per timed run")
    p.add_argument("--repeats", type=int, default=5, help="timed runs per peer (median)")
    p.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    p.set_defaults(func=run_handoff)


def run_handoff(args: argparse.Namespace) -> int:
    from benchmarks import handoff

    rows = handoff.report(args.sizes_mib, items=args.items, repeats=args.repeats)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"hand-off per item, 2 workers, median of {args.repeats} x {args.items} items")
    print(
        f"{'size':>6} {'peer':>16} {'median ms':>10} {'min-max ms':>14} {'PSS MiB':>8} {'torch/x':>8}"
    )
    for r in rows:
        peer = "torch DataLoader" if r["kind"] == "torch" else f"edgeload {r['kind']}"
        spread = f"{r['min_s'] * 1e3:.3f}-{r['max_s'] * 1e3:.3f}"
        print(
            f"{r['size_mib']:>4}Mi {peer:>16} {r['median_s'] * 1e3:>10.3f} {spread:>14} "
            f"{r['pss_bytes'] / 2**20:>8.0f} {r['torch_ratio']:>7.1f}x"
        )
    for size in args.sizes_mib:
        copy = next(r["copy_s"] for r in rows if r["size_mib"] == size)
        print(f"(one {size} MiB copy, the production work on every side: {copy * 1e3:.3f} ms)")
    return 0


# Areas whose module in benchmarks/ has add_arguments(parser) and run(args) -> int.
MODULES = {
    "transfer": (
        "bench_transfer",
        "host -> GPU batches: pageable .cuda(), stock pin_memory, pinned async, mapped, managed",
    ),
    "dataset": (
        "bench_dataset",
        "JPEG decode+resize dataset: edgeload DataLoader vs torch (0 workers, fork, spawn) "
        "and two bare threads",
    ),
    "video": (
        "bench_video",
        "4 x 720p H.264 -> 640x640 batches: StreamLoader vs plain loop, thread-per-stream, "
        "torch DataLoader, ceiling; live frame age",
    ),
    "gst": (
        "bench_gst",
        "1080p H.264 -> 640x640 on OpenCV's GStreamer path: CPU per frame vs decode alone, "
        "the FFmpeg path, 4 streams at fps=5 (run with Debian's OpenCV + python3-gi)",
    ),
    "live": (
        "bench_live",
        "live RTSP cameras, true capture-to-consumer age: StreamLoader vs OpenCV latest-frame "
        "threads, ultralytics LoadStreams, vidgear CamGear",
    ),
    "detect": (
        "bench_detect",
        "YOLOv8n on 4 live RTSP cameras: StreamLoader -> forward -> NMS vs Ultralytics' "
        "predict(stream=True), processed fps and capture-to-result age",
    ),
    "soak": (
        "bench_soak",
        "both loaders for --minutes (RTSP camera cut every 30 s, 3 looping files, DataLoader "
        "epochs): PSS, fds, threads and /dev/shm must not grow",
    ),
    "small": (
        "bench_small",
        "4 looping 320x240 files -> 4 x 160x160 batches: StreamLoader vs a plain OpenCV loop",
    ),
    "scale": (
        "bench_scale",
        "one StreamLoader with 1-32 looping 640x360 files: CPU per frame, PSS per stream, fairness",
    ),
    "autotune": (
        "bench_autotune",
        "autotune, then the tuned profile vs the untuned plan vs torch defaults / OpenCV loop",
    ),
}


def add_module(subparsers: argparse._SubParsersAction, name: str) -> None:
    module_name, help_text = MODULES[name]
    module = importlib.import_module(f"benchmarks.{module_name}")
    p = subparsers.add_parser(name, help=help_text)
    module.add_arguments(p)
    p.set_defaults(func=module.run)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.py", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True)
    add_handoff(subparsers)
    for name in MODULES:
        add_module(subparsers, name)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
