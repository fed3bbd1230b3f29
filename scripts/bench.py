#!/usr/bin/env python3
"""edgeload benchmarks, one subcommand per area: ``python scripts/bench.py handoff``.

Each subcommand measures edgeload against the peers a user would otherwise pick, in
one run, and prints medians and ratios (``--json`` for a machine). To add an area,
write ``add_<area>(subparsers)`` that registers a parser with ``func=run_<area>`` and
append it to ``COMMANDS``.
"""

from __future__ import annotations

import argparse
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


def add_transfer(subparsers: argparse._SubParsersAction) -> None:
    from benchmarks import bench_transfer

    p = subparsers.add_parser(
        "transfer",
        help="host -> GPU batches: pageable .cuda(), stock pin_memory, pinned async, mapped, managed",
    )
    bench_transfer.add_arguments(p)
    p.set_defaults(func=bench_transfer.run)


def add_dataset(subparsers: argparse._SubParsersAction) -> None:
    from benchmarks import bench_dataset

    p = subparsers.add_parser(
        "dataset",
        help="JPEG decode+resize dataset: edgeload DataLoader vs torch (0 workers, fork, spawn)",
    )
    bench_dataset.add_arguments(p)
    p.set_defaults(func=bench_dataset.run)


def add_video(subparsers: argparse._SubParsersAction) -> None:
    from benchmarks import bench_video

    p = subparsers.add_parser(
        "video",
        help="4 x 720p H.264 -> 640x640 batches: StreamLoader vs plain loop, thread-per-stream, "
        "torch DataLoader, ceiling; live frame age",
    )
    bench_video.add_arguments(p)
    p.set_defaults(func=bench_video.run)


def add_autotune(subparsers: argparse._SubParsersAction) -> None:
    from benchmarks import bench_autotune

    p = subparsers.add_parser(
        "autotune",
        help="autotune, then the tuned profile vs the untuned plan vs torch defaults / OpenCV loop",
    )
    bench_autotune.add_arguments(p)
    p.set_defaults(func=bench_autotune.run)


COMMANDS = [add_handoff, add_transfer, add_dataset, add_video, add_autotune]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.py", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True)
    for add in COMMANDS:
        add(subparsers)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
