"""Live cameras: true capture-to-consumer frame age, against the packages people use.

Cameras: ``tests/clock_camera.py``, a gst-rtsp-server on loopback with one appsrc
per camera (``--cameras`` x ``--size`` at 30 fps, x264 ultrafast/zerolatency), that
draws each frame's capture time (wall clock, ms) into the picture as black and white
blocks.  Every contender's consumer resizes its frames to 640x640 (edgeload does it
inside the loader) and reads the time back from the resized pixels, so each one's
true age is measured the same way, from the camera's clock to the consumer's hands.

Contenders, each in a fresh process (peak PSS of its tree sampled from outside):

- ``edgeload``: ``StreamLoader(urls, size=(640, 640))`` (``latest``, the plan).
- ``opencv``: the latest-frame recipe, one thread per camera doing ``cap.read()``
  and keeping the newest frame (reopening after a failed read); the consumer takes
  each camera's newest and resizes.
- ``ultralytics``: ``ultralytics.data.loaders.LoadStreams`` (``buffer=False``), its
  frames resized by the consumer (YOLO's own preprocessing would letterbox them).
- ``vidgear``: one ``vidgear.gears.CamGear(url).start()`` per camera, ``read()`` each,
  with its defaults (threaded queue mode: a FIFO of up to 96 frames per camera) and a
  30 s read timeout.
- ``vidgear-latest``: the same with ``THREADED_QUEUE_MODE=False``, CamGear's option for
  reading the newest frame instead of the queue: its setting for a live camera.

torch's DataLoader has no live-camera mode; it is measured on files (``bench_video``).
Consumers: ``--consumer-ms`` (80 and 10): the model's time per batch, a sleep.
Figures per contender: true age p50/p99/max, unique frames per second per camera,
CPU ms per delivered unique frame (the contender's process, not the cameras').

Run: ``flock /tmp/cpu.lock python scripts/bench.py live [--rounds 2] [--out r.json]``;
``--baseline DIR`` also runs the StreamLoader of the checkout in DIR (another commit)
as ``edgeload-base``, interleaved with the rest, to measure a change before and after.
edgeload's results carry its own ``age_ms`` on the same frames (``own_age_*``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

from benchmarks import _common

ROOT = Path(__file__).resolve().parents[1]
CONTENDERS = ("edgeload", "opencv", "ultralytics", "vidgear", "vidgear-latest")
# The peer package a contender needs, where its name is not the package's
_PACKAGES = {"vidgear-latest": "vidgear"}
OUT = (640, 640)
_TIMEOUT_S = 120  # one contender's run; a hung one is reported and the rest go on
_FIRST_FRAME_S = 30.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The benchmark's options (shared with ``scripts/bench.py live``)."""
    parser.add_argument("--cameras", type=int, default=4)
    parser.add_argument("--size", default="960x540", help="camera WIDTHxHEIGHT")
    parser.add_argument("--consumer-ms", type=float, nargs="+", default=[80.0, 10.0])
    parser.add_argument("--seconds", type=float, default=8.0, help="measured, per run")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds not measured")
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds (median)")
    parser.add_argument("--contenders", nargs="+", choices=CONTENDERS, default=list(CONTENDERS))
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache/edgeload/bench")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="a checkout of another commit: its "
        "StreamLoader runs too, as edgeload-base (before/after a change)",
    )
    parser.add_argument("--out", help="write the results as JSON here")


# --- contenders (in the child): each returns a function giving the next frames -------


def _edgeload(urls: list[str]) -> tuple[Callable[[], list[tuple[int, Any]]], Callable[[], None]]:
    from edgeload.video import StreamLoader

    loader = StreamLoader(urls, size=OUT)
    batches = iter(loader)
    own: list[tuple[float, float]] = OWN_AGES

    def take() -> list[tuple[int, Any]]:
        batch = next(batches)
        frames = batch.frames.numpy()
        metas = [(i, m) for i, m in enumerate(batch.meta) if m is not None]
        now = time.monotonic()
        own.extend((now, m.age_ms) for _, m in metas)  # what edgeload says the age is
        return [(m.stream_id, frames[i]) for i, m in metas]

    def close() -> None:
        streams = loader.stats()["streams"]
        keys = ("frames", "delivered", "unconverted", "backlog", "reconnects", "late")
        DIAGNOSTICS["streams"] = [{k: s.get(k) for k in keys} for s in streams]
        loader.close()

    return take, close


DIAGNOSTICS: dict[str, Any] = {}
OWN_AGES: list[tuple[float, float]] = []  # edgeload's own age_ms per frame, with when


def _opencv(urls: list[str]) -> tuple[Callable[[], list[tuple[int, Any]]], Callable[[], None]]:
    import threading

    import cv2

    latest: list[Any] = [None] * len(urls)
    stop = threading.Event()

    def read(i: int, url: str) -> None:
        cap = cv2.VideoCapture(url, cv2.CAP_FFMPEG)
        while not stop.is_set():
            ok, frame = cap.read()
            if ok:
                latest[i] = frame  # one reference swap: the consumer sees whole frames
            else:  # the recipe's reconnect: an open can fail on a busy box
                cap.release()
                time.sleep(0.5)
                cap = cv2.VideoCapture(url, cv2.CAP_FFMPEG)
        cap.release()

    threads = [threading.Thread(target=read, args=(i, u), daemon=True) for i, u in enumerate(urls)]
    for t in threads:
        t.start()

    def take() -> list[tuple[int, Any]]:
        until = time.monotonic() + _FIRST_FRAME_S
        while any(f is None for f in latest):
            if time.monotonic() > until:
                raise TimeoutError(f"opencv: no frame from some of {urls} in {_FIRST_FRAME_S} s")
            time.sleep(0.01)
        return [(i, cv2.resize(f, OUT)) for i, f in enumerate(list(latest))]

    def close() -> None:
        stop.set()
        for t in threads:
            t.join(10)

    return take, close


def _ultralytics(urls: list[str]) -> tuple[Callable[[], list[tuple[int, Any]]], Callable[[], None]]:
    import tempfile

    import cv2
    from ultralytics.data.loaders import LoadStreams

    listing = Path(tempfile.mkdtemp()) / "cams.streams"
    listing.write_text("\n".join(urls) + "\n")
    streams = LoadStreams(str(listing), buffer=False)
    it = iter(streams)

    def take() -> list[tuple[int, Any]]:
        _, images, _ = next(it)
        return [(i, cv2.resize(im, OUT)) for i, im in enumerate(images)]

    return take, streams.close


def _vidgear(
    urls: list[str], queue_mode: bool = True
) -> tuple[Callable[[], list[tuple[int, Any]]], Callable[[], None]]:
    import cv2
    from vidgear.gears import CamGear

    # Its defaults, but a read that waits forever would hang the benchmark.
    options = {"THREAD_TIMEOUT": _FIRST_FRAME_S, "THREADED_QUEUE_MODE": queue_mode}
    gears = [CamGear(source=u, logging=False, **options).start() for u in urls]

    def take() -> list[tuple[int, Any]]:
        frames = [(i, g.read()) for i, g in enumerate(gears)]
        return [(i, cv2.resize(f, OUT)) for i, f in frames if f is not None]

    def close() -> None:
        for g in gears:
            g.stop()

    return take, close


def _child(args: argparse.Namespace) -> dict[str, Any]:
    name, urls, consumer_s = args.child, args.urls, args.consumer
    warmup, seconds = args.warmup, args.seconds
    os.environ.setdefault("YOLO_VERBOSE", "False")
    os.environ.setdefault("YOLO_OFFLINE", "True")
    sys.path.append(args.site)
    sys.path.insert(0, str(ROOT / "tests"))
    if args.edgeload_from:  # edgeload-base: another checkout's loader, for before/after
        sys.path.insert(0, args.edgeload_from)
        name = "edgeload"
    import clock_camera
    import cv2  # noqa: F401  (as in the user's program: the memory baselines match)
    import torch  # noqa: F401

    start = {"edgeload": _edgeload, "opencv": _opencv, "ultralytics": _ultralytics,
             "vidgear": _vidgear,
             "vidgear-latest": lambda urls: _vidgear(urls, queue_mode=False)}[name]  # fmt: skip
    take, close = start(urls)
    ages: list[float] = []
    unique: list[set[int]] = [set() for _ in urls]
    unreadable = 0
    stale: list[tuple[float, int, float]] = []
    cpu0 = None
    try:
        # Warm-up counts from the first batch with every camera in it: opens of network
        # streams are serialised by OpenCV's FFmpeg lock, and take a second each.
        while len({cam for cam, _ in take()}) < len(urls):
            time.sleep(consumer_s)
        measuring_from = time.monotonic() + warmup
        while time.monotonic() < measuring_from + seconds:
            frames = take()
            now = time.time()
            if cpu0 is None and time.monotonic() >= measuring_from:
                cpu0, measured_at = _common.cpu_s(), time.monotonic()
            for cam, frame in frames:
                value = clock_camera.read_stamp(frame)
                if cpu0 is None:
                    continue
                if value is None:
                    unreadable += 1
                    continue
                ages.append(float((int(now * 1000) - value) & 0xFFFFFFFF))
                if ages[-1] > 300:  # what a stale frame looked like, for the report
                    stale.append((round(time.monotonic() - measuring_from, 2), cam, ages[-1]))
                unique[cam].add(value)
            time.sleep(consumer_s)
        cpu = _common.cpu_s() - (cpu0 or 0.0)
        span = time.monotonic() - measured_at
    finally:
        close()
    frames_unique = sum(len(u) for u in unique)
    own = [age for at, age in OWN_AGES if at >= measured_at]
    return {"ages": ages, "unique_fps": [len(u) / span for u in unique], "cpu_s": cpu,
            "frames_unique": frames_unique, "unreadable": unreadable, "span_s": span,
            "stale": stale[:20], "own_ages": own, **DIAGNOSTICS}  # fmt: skip


# --- the parent ------------------------------------------------------------------------


def _run_child(name: str, urls: list[str], site: Path, consumer_s: float,
               args: argparse.Namespace) -> dict[str, Any]:  # fmt: skip
    cmd = [sys.executable, os.path.abspath(__file__), "--child", name, "--site", str(site),
           "--consumer", str(consumer_s), "--warmup", str(args.warmup),
           "--seconds", str(args.seconds), *urls]  # fmt: skip
    if name == "edgeload-base":
        cmd[4:4] = ["--edgeload-from", str(Path(args.baseline).resolve())]
    return _common.run_child(cmd, timeout_s=_TIMEOUT_S)


def run(args: argparse.Namespace) -> int:
    """Start the cameras, run each contender per consumer in interleaved rounds."""
    from benchmarks import peers
    from edgeload.measure import percentile

    package = {c: _PACKAGES.get(c, c) for c in args.contenders}
    wanted = [p for p in dict.fromkeys(package.values()) if p in peers.PEERS]
    site, installed = peers.ensure(args.cache, wanted)
    versions = {c: installed[package[c]] for c in args.contenders if package[c] in installed}
    report: dict[str, Any] = {
        "workload": f"{args.cameras} x {args.size}@30 loopback RTSP (x264 ultrafast), "
        f"consumer resizes to {OUT[0]}x{OUT[1]}; {args.seconds:g} s measured after "
        f"{args.warmup:g} s warm-up",
        "cpus": os.cpu_count(), "load_avg": os.getloadavg(), "peers": versions,
        "versions": _common.versions(), "results": {},
    }  # fmt: skip
    runnable = [c for c in args.contenders if not versions.get(c, "").startswith("missing")]
    if args.baseline:
        runnable.insert(1, "edgeload-base")
        report["baseline"] = str(args.baseline)
    for c in args.contenders:
        if c not in runnable:
            print(f"{c}: {versions[c]}", flush=True)
    cams, urls = _common.start_clock_cameras(
        args.cameras, args.size, 18600 + os.getpid() % 1000, bench="live"
    )
    errors: dict[str, list[str]] = {}
    report["errors"] = errors

    cases = {f"{name}@{ms:g}ms": (name, ms) for ms in args.consumer_ms for name in runnable}

    def run_one(key: str, _round: int) -> dict[str, Any] | None:
        name, ms = cases[key]
        try:
            r = _run_child(name, urls, site, ms / 1000, args)
        except Exception as exc:  # one contender's failure is a result too
            errors.setdefault(key, []).append(repr(exc)[-500:])
            print(f"{name:>12} {ms:3g} ms: failed: {exc!r}"[:300], flush=True)
            return None
        print(f"{name:>12} {ms:3g} ms: age p50 {percentile(r['ages'], 50):6.1f} "
              f"p99 {percentile(r['ages'], 99):6.1f} ms  unique/s/cam "
              f"{min(r['unique_fps']):5.1f}  CPU "
              f"{1000 * r['cpu_s'] / max(1, r['frames_unique']):5.2f} ms/frame  "
              f"PSS {r['peak_pss_mib']:.0f} MiB", flush=True)  # fmt: skip
        return r

    # Every contender at every consumer delay, once per round; each round's order is
    # rotated, so the slowness of going first in a round falls on each in turn.
    try:
        runs, report["round_orders"] = _common.interleave(list(cases), args.rounds, run_one)
        runs = {k: rs for k, rs in runs.items() if rs}
        report["load_avg_after"] = os.getloadavg()
    finally:
        cams.terminate()
        cams.wait(10)
    for key, rs in runs.items():
        report["results"][key] = {
            "age_p50_ms": statistics.median(percentile(r["ages"], 50) for r in rs),
            "age_p99_ms": statistics.median(percentile(r["ages"], 99) for r in rs),
            "age_max_ms": statistics.median(max(r["ages"], default=float("nan")) for r in rs),
            "unique_fps_min_cam": statistics.median(min(r["unique_fps"]) for r in rs),
            "cpu_ms_per_frame": statistics.median(
                1000 * r["cpu_s"] / max(1, r["frames_unique"]) for r in rs),
            "peak_pss_mib": statistics.median(r["peak_pss_mib"] for r in rs),
            "unreadable": sum(r["unreadable"] for r in rs), "runs": len(rs),
            # per round, so before/after pairs can be read round by round
            "age_p99_ms_rounds": [percentile(r["ages"], 99) for r in rs],
            **_own_ages(rs, percentile),
            "diagnostics": [{k: r.get(k) for k in ("stale", "streams")} for r in rs],
        }  # fmt: skip
    return _common.finish(report, args.out)


def _own_ages(rs: list[dict[str, Any]], percentile: Callable[..., float]) -> dict[str, Any]:
    """edgeload's own ``age_ms`` on the same frames (medians over rounds): the true age
    minus it is what no RTSP client sees (the camera's encode, the first transit)."""
    if not all(r.get("own_ages") for r in rs):
        return {}
    return {
        "own_age_p50_ms": statistics.median(percentile(r["own_ages"], 50) for r in rs),
        "own_age_p99_ms": statistics.median(percentile(r["own_ages"], 99) for r in rs),
        "unseen_p50_ms": statistics.median(
            percentile(r["ages"], 50) - percentile(r["own_ages"], 50) for r in rs),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (``--child NAME`` runs one contender)."""
    hidden = [
        ("--site", {}),
        ("--consumer", {"type": float}),
        ("--edgeload-from", {}),
        ("urls", {"nargs": "*"}),
    ]
    return _common.main(argv, doc=__doc__ or "", add_arguments=add_arguments, run=run,
                        child=_child, hidden=hidden)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
