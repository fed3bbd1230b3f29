"""A detector on live cameras: edgeload's StreamLoader against Ultralytics' own pipeline.

Cameras: ``tests/clock_camera.py`` (``--cameras`` x ``--size`` at 30 fps over loopback
RTSP) draws each frame's capture time into the picture; every contender reads it back
from the pixels the model saw, so its age is measured from the camera's clock.

The model: the same YOLOv8n (``YOLO("yolov8n.yaml")``, random weights from a fixed
seed, so every contender runs the same network and NMS sees the same candidates) at
the same ``--imgsz``, with the same torch threads, in a fresh process per contender.

- ``ultralytics``: ``YOLO.predict(source=<a .streams file of the urls>, stream=True)``
  - its ``LoadStreams`` (one reader thread per camera, OpenCV's default FFmpeg
  threads), its letterbox and preprocessing, forward, NMS and box scaling.
- ``ultralytics-ffmpeg1``: the same with ``OPENCV_FFMPEG_CAPTURE_OPTIONS`` naming
  ``threads;1``
  (one FFmpeg thread per camera, leaving the cores to the model).
- ``edgeload``: ``StreamLoader(urls, layout="NCHW", color="rgb", resize="letterbox",
  dtype=torch.float32)`` feeding the network as Ultralytics' predictor prepares it
  (its ``AutoBackend``: fused, channels-last on x86), Ultralytics'
  ``non_max_suppression`` and ``FrameMeta.to_source``.  Its size is what Ultralytics'
  own letterbox makes of the cameras (``imgsz`` on the long side, the short side
  rounded up to the stride: 320x256 for 640x480), so both run the same compute.
- ``model-alone``: no cameras and no loader: the same network and NMS on one fixed
  batch of that size, over and over, with glibc's malloc primed as edgeload primes it:
  the most frames per second any loader could feed this model here.

Where torchvision's compiled ``nms`` does not load (PyPI's x86_64 torchvision beside a
CPU-only torch), the child replaces ``torchvision.ops.nms`` with Ultralytics' own
``TorchNMS.nms`` for every contender alike: a benchmark-only patch, so the predictor
runs at all.

Figures per contender: processed frames per second (all cameras), true
capture-to-result age p50/p99 (the camera's clock to the boxes in hand), the age at
hand-over (the frames as the model gets them), CPU ms per processed frame (the
contender's process) and peak PSS.  Rounds are interleaved in rotated order.

Run (about 2 minutes per round with the defaults)::

    flock /tmp/cpu.lock python scripts/bench.py detect --rounds 3 --out detect.json

The contenders need ``ultralytics`` and ``torchvision``: installed into the benchmark
cache by :mod:`benchmarks.peers`, or ``--python`` names an interpreter that has them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Tuple

from benchmarks import _common

ROOT = Path(__file__).resolve().parents[1]
CONTENDERS = ("edgeload", "ultralytics", "ultralytics-ffmpeg1", "model-alone")
STRIDE = 32  # YOLOv8's largest stride: Ultralytics letterboxes to multiples of it
_TIMEOUT_S = 300  # one contender's run; a hung one is reported and the rest go on


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The benchmark's options (shared with ``scripts/bench.py detect``)."""
    parser.add_argument("--cameras", type=int, default=4)
    parser.add_argument("--size", default="640x480", help="camera WIDTHxHEIGHT")
    parser.add_argument("--imgsz", type=int, default=320, help="model input, long side")
    parser.add_argument("--model", default="yolov8n.yaml", help="an Ultralytics YAML or .pt")
    parser.add_argument("--torch-threads", type=int, default=0,
                        help="torch threads in every contender (0: Ultralytics' default, "
                        "one less than the CPUs, at most 8)")  # fmt: skip
    parser.add_argument("--seconds", type=float, default=30.0, help="measured, per run")
    parser.add_argument("--warmup", type=float, default=5.0,
                        help="seconds not measured, after every camera has delivered")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median)")
    parser.add_argument("--contenders", nargs="+", choices=CONTENDERS, default=list(CONTENDERS))
    parser.add_argument("--python", help="interpreter for the contenders (one with "
                        "ultralytics and torchvision); default: this one, with the "
                        "benchmark cache's peers")  # fmt: skip
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache/edgeload/bench")
    parser.add_argument("--out", help="write the results as JSON here")


# --- in the child --------------------------------------------------------------------


class _Tally:
    """Capture-to-hand-over and capture-to-result ages of the frames processed."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.handover: list[float] = []
        self.result: list[float] = []
        self.own: list[float] = []  # edgeload's own age_ms of the same frames
        self.frames = 0
        self.unreadable = 0


def _stamp_ages(stamps: list[int | None], now_s: float) -> list[float]:
    now = int(now_s * 1000)
    return [float((now - s) & 0xFFFFFFFF) for s in stamps if s is not None]


def _patch_nms() -> str:
    """Make Ultralytics' predictor run where torchvision's compiled operators do not
    load (PyPI's x86_64 torchvision, built for CUDA torch, beside a CPU-only torch).

    ``import torchvision`` then fails registering a fake kernel for the missing
    ``torchvision::nms``, and the predictor imports it for streams; once imported,
    Ultralytics' NMS calls ``torchvision.ops.nms``.  So: declare the two operators'
    schemas (no kernel), import again, and point ``torchvision.ops.nms`` at
    Ultralytics' own ``TorchNMS.nms`` - for every contender alike.  Where torchvision
    loads (a Jetson, a Pi) nothing is changed.
    """
    import torch

    try:
        import torchvision

        torchvision.ops.nms(torch.zeros(1, 4), torch.zeros(1), 0.5)
        return "torchvision"
    except Exception as exc:  # the import, or the operator's call
        why = str(exc).splitlines()[0][:100]
    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[name]  # the half-made modules of the failed import
    lib = torch.library.Library("torchvision", "DEF")
    for op in ("nms", "qnms"):
        lib.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _LIBS.append(lib)  # the schemas last as long as the library object
    import torchvision
    from ultralytics.utils.nms import TorchNMS

    torchvision.ops.nms = TorchNMS.nms
    return f"ultralytics TorchNMS (torchvision's operators do not load: {why})"


_LIBS: list[Any] = []


# A contender in the child: step() (frames processed), close(), and the frames one
# step gives once every camera is in.
Contender = Tuple[Callable[[], int], Callable[[], None], int]


def _run_ultralytics(args: argparse.Namespace, model: Any, tally: _Tally) -> Contender:
    """Ultralytics' streaming predict: a step is one result (one camera's frame);
    ``LoadStreams`` opens every camera before the first."""
    import tempfile

    import clock_camera
    import torch
    from ultralytics.utils import NUM_THREADS

    listing = Path(tempfile.mkdtemp()) / "cams.streams"
    listing.write_text("\n".join(args.urls) + "\n")
    seen: dict[int, float] = {}  # id(frame) -> the age at hand-over

    def on_batch_start(predictor: Any) -> None:
        now = time.time()
        for im in predictor.batch[1]:
            stamp = clock_camera.read_stamp(im)
            if stamp is not None:
                seen[id(im)] = _stamp_ages([stamp], now)[0]

    def on_start(_predictor: Any) -> None:
        # The predictor's device set-up sets its own thread count; the same for all.
        torch.set_num_threads(args.torch_threads or NUM_THREADS)

    model.add_callback("on_predict_start", on_start)
    model.add_callback("on_predict_batch_start", on_batch_start)
    results = model.predict(source=str(listing), stream=True, imgsz=args.imgsz, conf=0.25,
                            verbose=False)  # fmt: skip

    def step() -> int:
        r = next(results)
        now = time.time()
        stamp = clock_camera.read_stamp(r.orig_img)
        if stamp is None:
            tally.unreadable += 1
        else:
            tally.result.extend(_stamp_ages([stamp], now))
        if id(r.orig_img) in seen:
            tally.handover.append(seen.pop(id(r.orig_img)))
        if len(seen) > 64:  # frames whose result never came
            seen.clear()
        return 1

    def close() -> None:
        predictor = model.predictor
        if predictor is not None and getattr(predictor, "dataset", None) is not None:
            predictor.dataset.close()

    return step, close, 1


def _network(model: Any) -> Any:
    """The network Ultralytics' predictor runs: its AutoBackend fuses convolutions and
    batch norms and picks the memory format (channels-last on x86 CPUs with oneDNN)."""
    import torch
    from ultralytics.nn.autobackend import AutoBackend

    return AutoBackend(model.model, device=torch.device("cpu"), fuse=True, verbose=False).eval()


def _batch_size(args: argparse.Namespace) -> tuple[int, int]:
    """The (width, height) Ultralytics' letterbox makes of the cameras at ``imgsz``."""
    from edgeload.video import letterbox_size

    w, h = (int(v) for v in args.size.split("x"))
    return letterbox_size((w, h), args.imgsz, stride=STRIDE)


def _run_model_alone(args: argparse.Namespace, model: Any, tally: _Tally) -> Contender:
    """The network and NMS on one fixed batch: the ceiling; a step is one batch."""
    import torch
    from ultralytics.utils.nms import non_max_suppression

    from edgeload.pipeline._malloc import prime_malloc

    net = _network(model)
    lw, lh = _batch_size(args)
    n = len(args.urls)  # the cameras run (their encoders load the box as for the others)
    frames = torch.rand(n, 3, lh, lw, generator=torch.Generator().manual_seed(0))
    prime_malloc()  # as a loader's first slot pool does

    def step() -> int:
        with torch.inference_mode():
            out = net(frames)
            non_max_suppression(out[0] if isinstance(out, (tuple, list)) else out, 0.25)
        return n

    return step, lambda: None, n


def _run_edgeload(args: argparse.Namespace, model: Any, tally: _Tally) -> Contender:
    """StreamLoader -> forward -> Ultralytics' NMS -> to_source: a step is one batch."""
    import clock_camera
    import torch
    from ultralytics.utils.nms import non_max_suppression

    from edgeload.video import StreamLoader

    net = _network(model)
    loader = StreamLoader(args.urls, size=_batch_size(args),
                          layout="NCHW", color="rgb", resize="letterbox",
                          dtype=torch.float32)  # fmt: skip
    batches = iter(loader)

    def step() -> int:
        batch = next(batches)
        handed = time.time()
        frames = batch.frames
        stamps = []
        metas = [(i, m) for i, m in enumerate(batch.meta) if m is not None]
        for i, m in metas:
            (sx, sy), (left, top) = m.scale, m.pad
            pw, ph = round(m.source_size[0] * sx), round(m.source_size[1] * sy)
            # The green plane of the picture as the model gets it, read in place.
            green = frames[i, 1, top : top + ph, left : left + pw].numpy()
            stamps.append(clock_camera.read_stamp(green, white=1.0))
            tally.own.append(m.age_ms)
        with torch.inference_mode():
            out = net(frames)
            dets = non_max_suppression(out[0] if isinstance(out, (tuple, list)) else out, 0.25)
            for i, m in metas:
                dets[i][:, :4] = m.to_source(dets[i][:, :4])
        now = time.time()
        tally.handover.extend(_stamp_ages(stamps, handed))
        tally.result.extend(_stamp_ages(stamps, now))
        tally.unreadable += sum(s is None for s in stamps)
        return len(metas)

    return step, loader.close, len(args.urls)


def _child(args: argparse.Namespace) -> dict[str, Any]:
    name = args.child
    if name == "ultralytics-ffmpeg1":  # read by OpenCV when it opens each stream
        # These replace OpenCV's own RTSP default (TCP), so it is named again.
        os.environ["OPENCV_FFMPEG_CAPTURE_OPTIONS"] = "rtsp_transport;tcp|threads;1"
    os.environ.setdefault("YOLO_VERBOSE", "False")
    os.environ.setdefault("YOLO_OFFLINE", "True")
    sys.path.insert(0, str(ROOT / "tests"))
    import torch
    from ultralytics import YOLO
    from ultralytics.utils import NUM_THREADS

    threads = args.torch_threads or NUM_THREADS
    torch.set_num_threads(threads)
    torch.manual_seed(0)  # the same random weights in every contender
    model = YOLO(args.model)
    nms = _patch_nms()
    tally = _Tally()
    start = {"edgeload": _run_edgeload, "model-alone": _run_model_alone}.get(name, _run_ultralytics)
    step, close, full = start(args, model, tally)
    try:
        # Warm-up counts from the first step with every camera in: the cameras open
        # one at a time.
        until = time.monotonic() + 120
        while step() < full:
            if time.monotonic() > until:
                raise TimeoutError(f"{name}: not every camera of {args.urls} came in in 120 s")
        measuring_from = time.monotonic() + args.warmup
        while time.monotonic() < measuring_from:
            step()
        tally.reset()
        cpu0, t0 = _common.cpu_s(), time.monotonic()
        while time.monotonic() < t0 + args.seconds:
            tally.frames += step()
        cpu, span = _common.cpu_s() - cpu0, time.monotonic() - t0
    finally:
        close()
    return {"result_ages": tally.result, "handover_ages": tally.handover,
            "own_ages": tally.own, "frames": tally.frames, "span_s": span, "cpu_s": cpu,
            "unreadable": tally.unreadable, "torch_threads": torch.get_num_threads(),
            "nms": nms, "os_threads": _common.os_threads()}  # fmt: skip


# --- the parent ------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    """Start the cameras, run each contender in interleaved rounds, report medians."""
    from edgeload.measure import percentile

    python = args.python or sys.executable
    if args.python:
        site_note = f"contenders run with {args.python}"
    else:
        from benchmarks import peers

        site, installed = peers.ensure(args.cache, ["ultralytics"])
        if installed["ultralytics"].startswith("missing"):
            raise SystemExit(f"bench detect: ultralytics is {installed['ultralytics']}; "
                             "or pass --python with an interpreter that has it")  # fmt: skip
        os.environ.update(peers.peer_env(site))
        site_note = f"ultralytics {installed['ultralytics']} from {site}"
    report: dict[str, Any] = {
        "workload": f"{args.cameras} x {args.size}@30 loopback RTSP (x264 ultrafast), "
        f"{args.model} at imgsz {args.imgsz} (edgeload letterboxes to "
        f"{'x'.join(map(str, _batch_size(args)))}, as Ultralytics does); "
        f"{args.seconds:g} s measured after {args.warmup:g} s warm-up",
        "cpus": os.cpu_count(), "load_avg": os.getloadavg(), "peers": site_note,
        "versions": _common.versions(), "results": {},
    }  # fmt: skip
    cams, urls = _common.start_clock_cameras(
        args.cameras, args.size, 18700 + os.getpid() % 1000, bench="detect"
    )
    errors: dict[str, list[str]] = {}
    report["errors"] = errors

    def run_one(name: str, _round: int) -> dict[str, Any] | None:
        cmd = [python, os.path.abspath(__file__), "--child", name, "--imgsz", str(args.imgsz),
               "--model", args.model, "--size", args.size, "--torch-threads",
               str(args.torch_threads), "--seconds", str(args.seconds), "--warmup",
               str(args.warmup), *urls]  # fmt: skip
        try:
            # PSS read 20 times a second slowed the model's forward by up to 10 %.
            r = _common.run_child(cmd, timeout_s=_TIMEOUT_S + args.seconds + args.warmup,
                                  pss_interval_s=1.0)  # fmt: skip
        except Exception as exc:  # one contender's failure is a result too
            errors.setdefault(name, []).append(repr(exc)[-800:])
            print(f"{name:>20}: failed: {exc!r}"[:400], flush=True)
            return None
        print(f"{name:>20}: {r['frames'] / r['span_s']:5.1f} fps  age p50 "
              f"{percentile(r['result_ages'], 50):5.0f} p99 {percentile(r['result_ages'], 99):5.0f}"
              f" ms (hand-over p50 {percentile(r['handover_ages'], 50):4.0f})  CPU "
              f"{1000 * r['cpu_s'] / max(1, r['frames']):5.1f} ms/frame  PSS "
              f"{r['peak_pss_mib']:.0f} MiB", flush=True)  # fmt: skip
        return r

    try:
        runs, report["round_orders"] = _common.interleave(args.contenders, args.rounds, run_one)
        report["load_avg_after"] = os.getloadavg()
    finally:
        cams.terminate()
        cams.wait(10)
    for name, rs in runs.items():
        if not rs:
            continue

        def med(values: Any) -> float | None:  # None where a contender has no ages
            got = [v for v in values if v == v]
            return statistics.median(got) if got else None

        report["results"][name] = {
            "fps": med(r["frames"] / r["span_s"] for r in rs),
            "fps_rounds": [r["frames"] / r["span_s"] for r in rs],
            "age_p50_ms": med(percentile(r["result_ages"], 50) for r in rs),
            "age_p99_ms": med(percentile(r["result_ages"], 99) for r in rs),
            "age_p99_ms_rounds": [percentile(r["result_ages"], 99) for r in rs
                                  if r["result_ages"]],
            "handover_p50_ms": med(percentile(r["handover_ages"], 50) for r in rs),
            "handover_p99_ms": med(percentile(r["handover_ages"], 99) for r in rs),
            "cpu_ms_per_frame": med(1000 * r["cpu_s"] / max(1, r["frames"]) for r in rs),
            "peak_pss_mib": med(r["peak_pss_mib"] for r in rs),
            "unreadable": sum(r["unreadable"] for r in rs), "runs": len(rs),
            "torch_threads": rs[0]["torch_threads"], "nms": rs[0]["nms"],
            **({"own_age_p50_ms": med(percentile(r["own_ages"], 50) for r in rs)}
               if all(r["own_ages"] for r in rs) else {}),
        }  # fmt: skip
    _ratios(report["results"])
    return _common.finish(report, args.out)


def _ratios(results: dict[str, Any]) -> None:
    """edgeload against the better Ultralytics run (by fps): the issue's two targets."""
    peers = [results[k] for k in ("ultralytics", "ultralytics-ffmpeg1") if k in results]
    if "edgeload" not in results or not peers:
        return
    if "model-alone" in results:
        for r in results.values():
            r["fps_vs_model_alone"] = r["fps"] / results["model-alone"]["fps"]
    best = max(peers, key=lambda r: r["fps"])
    ours = results["edgeload"]
    ours["fps_vs_best_ultralytics"] = ours["fps"] / best["fps"]
    ours["age_p99_vs_best_ultralytics"] = ours["age_p99_ms"] / best["age_p99_ms"]


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (``--child NAME`` runs one contender)."""
    hidden = [("urls", {"nargs": "*"})]
    return _common.main(argv, doc=__doc__ or "", add_arguments=add_arguments, run=run,
                        child=_child, hidden=hidden)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
