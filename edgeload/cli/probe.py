"""``edgeload probe``: what this device is, and the plan edgeload would use on it."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ..errors import EdgeloadError, PlatformError, redact
from ..platform.plan import Plan, plan_for
from ..platform.probe import Platform, probe
from ..platform.profile import load_profile


def _frame(text: str) -> tuple[int, int]:
    try:
        w, h = (int(p) for p in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected WIDTHxHEIGHT such as 640x640, got {text!r}"
        ) from None
    if w <= 0 or h <= 0:
        raise argparse.ArgumentTypeError(f"frame size must be positive, got {text!r}")
    return w, h


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``edgeload probe``'s options."""
    parser.add_argument(
        "--root", default="/", help="read /proc, /sys and /etc under DIR (default /)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--streams", type=int, default=4, help="video streams to plan for (default 4)"
    )
    parser.add_argument(
        "--frame", type=_frame, default=(640, 640), help="output frame WxH (default 640x640)"
    )
    parser.add_argument(
        "--source",
        action="append",
        default=[],
        metavar="URI",
        help="also show what a loader would open for URI (backend, pipeline); repeatable",
    )


def run(args: argparse.Namespace) -> int:
    """Probe, plan and print."""
    if not os.path.isdir(args.root):
        raise PlatformError(
            f"--root {args.root!r} is not a directory; pass a path to a board's tree"
        )
    if args.streams < 1:
        raise PlatformError(f"--streams must be >= 1, got {args.streams}")
    platform = probe(args.root)
    profile = load_profile(platform, workload="video")  # the plan below is a video plan
    plan = plan_for(streams=args.streams, frame=args.frame, platform=platform, profile=profile)
    sources = [_target(uri, platform, plan) for uri in args.source]
    bad = [src for src in sources if "error" in src]
    missing = fallbacks() if platform.live else []
    if args.json:
        out = platform.to_dict()
        out["profile"] = {"source": profile.source, **profile.to_dict()}
        out["plan"] = plan.to_dict()
        out["sources"] = sources
        out["fallbacks"] = [{"lacks": lack, "instead": instead} for lack, instead in missing]
        print(json.dumps(out, indent=2, default=str))
    else:
        print(_describe(platform, plan))
        if missing:
            print("\nfallbacks (what this box lacks -> what edgeload does instead)")
            for lack, instead in missing:
                print(f"  {lack}\n    -> {instead}")
        for src in sources:
            if "error" in src:
                print(f"\nsource {src['uri']}\n  cannot be used: {src['error']}")
            else:
                print(f"\nsource {src['uri']}\n  {src['kind']} via {src['backend']}: "
                      f"{src['open_string']}")  # fmt: skip
    if bad:
        # The whole report is printed first; the failure is the exit status and this line.
        for src in bad:
            print(f"edgeload probe: --source {src['uri']}: {src['error']}", file=sys.stderr)
        return 2
    return 0


def fallbacks() -> list[tuple[str, str]]:
    """What this Python's torch and OpenCV lack that edgeload uses, and what it does instead.

    Only for the running machine (a --root tree has no torch or OpenCV to ask).
    """
    from .._deps import has_module

    found: list[tuple[str, str]] = []
    if has_module("torch"):
        from ..dataset._worker import thread_worker_fallbacks

        found += thread_worker_fallbacks()
    if has_module("cv2"):
        from ..video._capture import capture_fallbacks

        found += capture_fallbacks()
    return found


def _target(uri: str, platform: Platform, plan: Plan) -> dict[str, str]:
    """What a loader on ``platform`` would open for ``uri`` (passwords hidden), or why
    it cannot (``error``): one bad source does not hide the others."""
    from ..video import target_for

    source: str | int = int(uri) if uri.isdigit() else uri
    try:
        target = target_for(source, platform=platform, plan=plan)
    except EdgeloadError as exc:
        return {"uri": redact(uri), "error": redact(exc)}
    return {
        "uri": redact(uri),
        "kind": str(target.kind),
        "backend": str(target.backend),
        "open_string": redact(target.open_string),
    }


def _gib(n: Any) -> str:
    return f"{n / (1 << 30):.1f} GiB" if isinstance(n, int) else "unknown"


def _no_decoder(platform: Platform) -> str:
    # The plan's decode line says the same (edgeload.platform.plan.choose_decode_backend).
    return "none found" if platform.live else "none found in this tree"


def _describe(platform: Platform, plan: Plan) -> str:
    cpu, mem, gpu = platform.cpu, platform.memory, platform.gpu
    clusters = ", ".join(
        f"{c.count}x {c.core_type}" + (f" @ {c.max_mhz:.0f} MHz" if c.max_mhz else "")
        for c in cpu.clusters
    )
    gpu_text = "none"
    if gpu.present:
        kind = "integrated (shares DRAM)" if gpu.integrated else "discrete"
        coherent = {True: ", I/O-coherent", False: ", not I/O-coherent", None: ""}[gpu.io_coherent]
        gpu_text = f"{gpu.name or 'CUDA GPU'}, {kind}{coherent}"
    opencv = platform.opencv
    cv_text = "not importable" if platform.live else "not inspected (not this machine)"
    if opencv is not None:
        cv_text = (
            f"{opencv.version} (FFmpeg {'yes' if opencv.ffmpeg else 'no'}, "
            f"GStreamer {'yes' if opencv.gstreamer else 'no'})"
        )
    rows = [
        ("device", f"{platform.model} [{platform.family}]"),
        ("soc", str(platform.soc or "unknown")),
        (
            "l4t",
            str(platform.l4t_release or "-")
            + (f", power mode {platform.power_mode}" if platform.power_mode else ""),
        ),
        ("container", "yes" if platform.in_container else "no"),
        (
            "cpu",
            f"{cpu.online_count} online ({clusters or 'unknown cores'}), {cpu.usable_count} usable",
        ),
        (
            "memory",
            f"{_gib(mem.total_bytes)} total, {_gib(mem.available_bytes)} available, "
            f"limit {_gib(mem.limit_bytes) if mem.limit_bytes else 'none'}, "
            f"/dev/shm {_gib(mem.shm_bytes)}, swap {_gib(mem.swap_bytes)}",
        ),
        ("gpu", gpu_text),
        ("opencv", cv_text),
        ("hw decode", ", ".join(platform.hw_decoders) or _no_decoder(platform)),
    ]
    width = max(len(r[0]) for r in rows)
    head = "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
    notes = "".join(f"\nnote       {n}" for n in platform.notes)
    plan_text = "\n".join("  " + line for line in plan.describe().splitlines())
    return f"{head}{notes}\n\nplan\n{plan_text}"
