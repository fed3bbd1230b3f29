"""``edgeload autotune``: measure the real workload here and write the profile import uses."""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

from .._deps import has_module
from ..errors import MissingDependency, ProfileError
from ..platform.profile import PROFILE_ENV, tuned_profile_path
from ..tuning._report import ProgressLine, format_table, save_plot
from .probe import _frame

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_MEMORY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)


def parse_memory(text: str, *, usable_bytes: int) -> int:
    """``"512M"``, ``"1.5GiB"``, ``"800000000"`` or ``"50%"`` (of usable RAM) -> bytes.

    Raises:
        ProfileError: not a size or a percentage in (0, 100].
    """
    text = text.strip()
    if text.endswith("%"):
        try:
            percent = float(text[:-1])
        except ValueError:
            percent = -1.0
        if not 0 < percent <= 100:
            raise ProfileError(f"--max-memory {text!r}: a percentage must be in (0, 100]")
        return int(usable_bytes * percent / 100)
    found = _MEMORY.match(text)
    if not found:
        raise ProfileError(
            f"--max-memory {text!r}: expected bytes (800000000), a size (512M, 1.5G) or a "
            "percentage of usable RAM (50%)"
        )
    return int(float(found.group(1)) * _UNITS[found.group(2).lower()])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``edgeload autotune``'s options."""
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--video", nargs="+", metavar="SOURCE", help="video sources to tune for")
    what.add_argument("--dataset", metavar="MODULE:FACTORY", help="factory() returns the dataset")
    parser.add_argument("--size", type=_frame, default=(640, 640), help="video frame WxH")
    parser.add_argument("--batch", type=int, default=None, help="video batch (default: streams)")
    parser.add_argument("--batch-size", type=int, default=32, help="dataset batch size")
    parser.add_argument("--tune-batch", action="store_true", help="also search the batch size")
    parser.add_argument(
        "--max-memory",
        default="80%",
        help="ceiling on peak own memory (anonymous + shared PSS): bytes, 512M, 2G or PERCENT",
    )
    parser.add_argument("--trial-seconds", type=float, default=5.0, help="measured s per trial")
    parser.add_argument("--warmup-seconds", type=float, default=None, help="unmeasured s first")
    parser.add_argument("--budget-seconds", type=float, default=300.0, help="total time budget")
    parser.add_argument("--max-trials", type=int, default=None, help="stop after N trials")
    parser.add_argument("--objective", choices=("throughput", "latency"), default="throughput")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--output", metavar="PATH", help="write the profile here")
    where.add_argument("--system", action="store_true", help="write to /etc/edgeload")
    where.add_argument("--no-write", action="store_true", help="measure and show only")
    parser.add_argument("--write-partial", action="store_true", help="write after Ctrl-C too")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--plot", metavar="PNG", help="save throughput vs memory per trial")


def _workload(args: argparse.Namespace) -> Any:
    from ..tuning._workloads import DatasetWorkload, VideoWorkload, load_factory

    if args.video:
        if args.batch is not None and args.batch < 1:
            raise ProfileError(f"--batch must be >= 1, got {args.batch}")
        sources = [int(s) if s.isdigit() else s for s in args.video]
        return VideoWorkload(sources, size=args.size, batch=args.batch)
    return DatasetWorkload(load_factory(args.dataset), batch_size=args.batch_size,
                           name=args.dataset)  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """Check the input, run the trials, print the table, write the winner."""
    from ..platform.probe import probe
    from ..tuning.tune import autotune, write_profile

    if args.plot and not has_module("matplotlib"):  # fail before the trials, not after
        raise MissingDependency(
            "--plot needs matplotlib: `pip install 'edgeload[plot]'`, or leave out --plot"
        )
    platform = probe()
    ceiling = parse_memory(args.max_memory, usable_bytes=platform.memory.usable_bytes or 1 << 30)
    workload = _workload(args)
    result = autotune(
        workload,
        platform=platform,
        max_memory_bytes=ceiling,
        trial_seconds=args.trial_seconds,
        warmup_seconds=args.warmup_seconds,
        budget_seconds=args.budget_seconds,
        objective=args.objective,
        tune_batch=args.tune_batch,
        max_trials=args.max_trials,
        progress=ProgressLine(sys.stderr, budget_s=args.budget_seconds),
    )
    written = None
    may_write = not args.no_write and (not result.interrupted or args.write_partial)
    if result.winner is not None and may_write:
        written = write_profile(result, platform=platform, path=args.output, system=args.system)
    plot = str(save_plot(result, args.plot)) if args.plot and result.trials else None
    if args.json:
        out = result.to_dict()
        out.update(profile_path=str(written) if written else None, plot=plot)
        print(json.dumps(out, indent=2, default=str))
    else:
        print(format_table(result))
        if written:
            found = tuned_profile_path()
            if found is not None and found.resolve() != written.resolve():
                print(f"wrote {written}, but {found} is found first ({PROFILE_ENV}, then the "
                      "user config dir, win over the system dir); remove it or unset it")  # fmt: skip
            else:
                print(f"wrote {written}; every loader on this device now plans with it "
                      "(`edgeload probe` shows it as the profile source)")  # fmt: skip
        elif result.interrupted:
            print("nothing written (interrupted; --write-partial writes the best so far)")
    if result.interrupted:
        return 130
    if result.winner is None:
        raise ProfileError(f"nothing written: {result.reason}")
    return 0
