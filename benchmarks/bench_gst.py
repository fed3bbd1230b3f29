"""GStreamer decode path: CPU per frame of the StreamLoader against decode alone.

Workload: one 1920x1080 H.264 file (``--seconds`` at 30 fps, made once with
ffmpeg/libx264 into ``--cache``) -> 640x640.  Run it with an OpenCV that has GStreamer
(Debian's ``python3-opencv``; python3-gi for the ``decode`` and ``pipeline`` modes).
Each mode runs in a fresh process, the modes interleaved in rotated rounds:

- ``decode``: ``filesrc ! qtdemux ! h264parse ! avdec_h264 ! fakesink`` through
  python3-gi: the decode the loader cannot avoid, the denominator of every ratio;
- ``pipeline``: edgeload's pipeline for the file with ``fakesink`` for the appsink:
  what the pipeline adds (on a software board nothing but a pass-through
  ``videoconvert``: the frame writer scales the I420 planes after OpenCV);
- ``gst``: ``StreamLoader([VideoSource(f, backend="gstreamer")], size=(640, 640))``;
- ``ffmpeg``: the same through OpenCV's FFmpeg (BGR at full size, then resized);
- ``gst-4x-fps5`` / ``ffmpeg-4x-fps5``: four sources of the file with ``fps=5``: five
  of each 30 frames are delivered, all are decoded.  A skipped frame must cost no more
  than its decode (it is grabbed, never retrieved, scaled or converted), so CPU per
  *decoded* frame stays near decode alone.

CPU is the process's (all its threads) between two points of the run: when the
``--warm`` th frame arrives and when the last does.  Imports, GStreamer's
initialisation, the codec discovery and the pipeline's start-up are one-off costs of
the order of a second, which over a 120-frame clip tripled a per-frame figure; the
report gives them apart (``startup_cpu_s``).

Run: ``python scripts/bench.py gst [--repeats 3] [--out r.json]`` under Debian's Python.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks._common import cpu_s, finish, interleave, run_child, versions
from benchmarks._common import main as bench_main

MODES = ("decode", "pipeline", "gst", "ffmpeg", "gst-4x-fps5", "ffmpeg-4x-fps5")
OUT = (640, 640)
_TIMEOUT_S = 600


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The benchmark's options (shared with ``scripts/bench.py gst``)."""
    parser.add_argument("--seconds", type=float, default=24.0, help="length of the clip")
    parser.add_argument("--repeats", type=int, default=3, help="rounds (median)")
    parser.add_argument("--warm", type=int, default=60, help="frames before the CPU clock")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache/edgeload/bench")
    parser.add_argument("--out", help="write the results as JSON here")


def make_clip(directory: Path, seconds: float) -> Path:
    """A 1080p30 H.264 mp4 with x264's preset B-frames (made once)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"gst-1920x1080-{seconds:g}s.mp4"
    if not path.exists():
        subprocess.run(
            ["ffmpeg", "-loglevel", "error", "-y", "-f", "lavfi",
             "-i", "testsrc2=size=1920x1080:rate=30", "-t", f"{seconds}", "-c:v", "libx264",
             "-preset", "veryfast", "-pix_fmt", "yuv420p", "-g", "60", str(path)],
            check=True, timeout=_TIMEOUT_S,
        )  # fmt: skip
    return path


class Clock:
    """CPU and wall time between the ``warm``-th frame and the last one."""

    def __init__(self, warm: int) -> None:
        self.warm = warm
        self.frames = 0
        self.start: tuple[float, float] | None = None
        self.end: tuple[float, float] = (0.0, 0.0)
        self.t0 = cpu_s()

    def tick(self, n: int = 1) -> None:
        self.frames += n
        now = (cpu_s(), time.monotonic())
        if self.start is None and self.frames >= self.warm:
            self.start, self.counted_from = now, self.frames
        self.end = now

    def result(self, decoded: int | None = None) -> dict[str, Any]:
        if self.start is None:
            raise RuntimeError(f"only {self.frames} frames: fewer than --warm {self.warm}")
        frames = self.frames - self.counted_from
        cpu = self.end[0] - self.start[0]
        return {
            "frames": frames,
            "frames_total": self.frames,
            "cpu_s": cpu,
            "seconds": self.end[1] - self.start[1],
            # The CPU not explained by the steady per-frame rate: imports, init, start-up
            "startup_cpu_s": self.end[0] - self.t0 - cpu * self.frames / max(1, frames),
            "decoded_per_delivered": decoded or 1,
        }


def _gi_run(description: str, warm: int) -> dict[str, Any]:
    import gi

    gi.require_version("Gst", "1.0")
    from gi.repository import Gst

    Gst.init(None)
    clock = Clock(warm)
    pipeline = Gst.parse_launch(description)
    sink = pipeline.get_by_name("out")

    def counted(_pad: Any, _info: Any) -> Any:
        clock.tick()
        return Gst.PadProbeReturn.OK

    sink.get_static_pad("sink").add_probe(Gst.PadProbeType.BUFFER, counted)
    pipeline.set_state(Gst.State.PLAYING)
    done = pipeline.get_bus().timed_pop_filtered(
        _TIMEOUT_S * Gst.SECOND, Gst.MessageType.EOS | Gst.MessageType.ERROR
    )
    pipeline.set_state(Gst.State.NULL)
    if done is None or done.type != Gst.MessageType.EOS:
        raise RuntimeError(f"{description!r} did not reach its end")
    return clock.result()


def _loader_run(path: str, backend: str, streams: int, fps: float | None, warm: int) -> Any:
    from edgeload.video import StreamLoader, VideoSource

    clock = Clock(warm)
    sources = [VideoSource(path, backend=backend, fps=fps) for _ in range(streams)]  # type: ignore[arg-type]
    with StreamLoader(sources, size=OUT) as loader:
        for batch in loader:
            clock.tick(len(list(filter(None, batch.meta))))
        pipeline = loader.stats()["streams"][0]["pipeline"]
    result = clock.result(decoded=round(30 / fps) if fps else 1)
    result["pipeline"] = pipeline
    return result


def _child(args: argparse.Namespace) -> dict[str, Any]:
    path, warm, mode = args.paths[0], args.warm, args.child
    if mode == "decode":
        return _gi_run(
            f'filesrc location="{path}" ! qtdemux ! h264parse ! avdec_h264 ! fakesink name=out',
            warm,
        )
    if mode == "pipeline":
        from edgeload.platform import probe
        from edgeload.video._capture import build_target
        from edgeload.video._gstreamer import Output, hardware_decoder

        target = build_target("file", path, backend="gstreamer", preferred="gstreamer",
                              decoder=hardware_decoder(probe()), output=Output(size=OUT))  # fmt: skip
        head, _, _ = target.open_string.rpartition("! appsink")
        result = _gi_run(f"{head}! fakesink name=out", warm)
        result["pipeline"] = target.open_string
        return result
    name, _, rest = mode.partition("-")
    backend = {"gst": "gstreamer", "ffmpeg": "ffmpeg"}[name]
    if rest:
        return _loader_run(path, backend, 4, 5.0, warm)
    return _loader_run(path, backend, 1, None, warm)


def run(args: argparse.Namespace) -> int:
    """Run the modes in rounds; print per-frame CPU, ratios to ``decode``; save JSON."""
    clip = make_clip(args.cache, args.seconds)
    report: dict[str, Any] = {
        "workload": f"1920x1080 H.264, {args.seconds:g} s at 30 fps -> 640x640; CPU from "
        f"frame {args.warm} to the last",
        "cpus": os.cpu_count(), "load_avg": os.getloadavg(), "versions": versions(), "modes": {},
    }  # fmt: skip

    def run_one(mode: str, _round: int) -> dict[str, Any] | None:
        cmd = [sys.executable, os.path.abspath(__file__), "--child", mode,
               "--warm", str(args.warm), str(clip)]  # fmt: skip
        try:
            r = run_child(cmd, timeout_s=_TIMEOUT_S)
        except Exception as e:  # a mode this machine cannot run (no python3-gi)
            print(f"{mode:>15}: failed: {e}", flush=True)
            return None
        per = 1000 * r["cpu_s"] / r["frames"]
        print(f"{mode:>15}: {per:6.2f} ms CPU/frame delivered, {per / r['decoded_per_delivered']:5.2f} "
              f"per decoded; start-up {r['startup_cpu_s']:.2f} s CPU", flush=True)  # fmt: skip
        return r

    runs, report["round_orders"] = interleave(args.modes, args.repeats, run_one)
    report["load_avg_after"] = os.getloadavg()
    for mode, rs in runs.items():
        if not rs:
            continue
        per = [1000 * r["cpu_s"] / r["frames"] for r in rs]
        report["modes"][mode] = {
            "frames": rs[0]["frames"],
            "cpu_ms_per_frame": statistics.median(per),
            "cpu_ms_per_frame_runs": [round(p, 3) for p in per],
            "cpu_ms_per_decoded_frame": statistics.median(per) / rs[0]["decoded_per_delivered"],
            "startup_cpu_s": statistics.median(r["startup_cpu_s"] for r in rs),
            "pipeline": rs[0].get("pipeline"),
        }
    decode = report["modes"].get("decode")
    if decode:
        for m in report["modes"].values():
            m["vs_decode"] = m["cpu_ms_per_decoded_frame"] / decode["cpu_ms_per_frame"]
    print(
        f"\n{'mode':>15} {'CPU ms/frame':>13} {'per decoded':>12} {'x decode':>9} {'start-up s':>11}"
    )
    for mode, m in report["modes"].items():
        print(f"{mode:>15} {m['cpu_ms_per_frame']:>13.2f} {m['cpu_ms_per_decoded_frame']:>12.2f} "
              f"{m.get('vs_decode', float('nan')):>8.2f}x {m['startup_cpu_s']:>11.2f}")  # fmt: skip
    return finish(report, args.out)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (``--child MODE`` runs one mode)."""
    return bench_main(argv, doc=__doc__ or "", add_arguments=add_arguments, run=run,
                      child=_child, hidden=[("paths", {"nargs": "*"})])  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
