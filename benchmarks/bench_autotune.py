"""Auto-tune: the tuned configuration against the untuned plan and the peers' defaults.

Two workloads, each tuned first with ``edgeload.tuning.tune`` (``--budget`` seconds), then
every contender measured in its own fresh process (so its memory is its own), the
contenders interleaved over ``--repeats`` rounds, medians reported:

- dataset: 256 in-memory 320x240 JPEGs, ``cv2.imdecode`` + resize to 128x128 + a
  little per-sample Python (label bookkeeping), batches of 32.
  Contenders: ``torch.utils.data.DataLoader`` with its defaults (``num_workers=0``),
  torch with the common recipe (``num_workers=<cores>``, ``persistent_workers``),
  ``edgeload.DataLoader(num_workers="auto")`` untuned, the same with the tuned profile.
- dataset-py: 512 samples made by ~1 ms of pure Python each (GIL-bound), 64x64x3,
  batches of 32; same contenders.
- video: 4 looping 320x240 H.264 files batched to 4 x 160x160.
  Contenders: a plain OpenCV loop (``_common.plain_batches``: read each capture in
  turn, resize into a batch array), ``StreamLoader`` untuned, ``StreamLoader`` with the
  tuned profile.

Measured per run: items/s over ``--seconds`` after a 1 s warm-up that starts at the
first batch, wait-for-batch (dataset) or frame age (video) p50/p99, and the peak PSS of
the process tree (``edgeload.measure.PeakPss``, warm-up included).

Run: ``python benchmarks/bench_autotune.py [--budget 90] [--repeats 3] [--json]``
(or ``python scripts/bench.py autotune``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from benchmarks._common import interleave  # noqa: E402

DATASET = ("torch-defaults", "torch-recipe", "edgeload-untuned", "edgeload-tuned")
VIDEO = ("opencv-loop", "edgeload-untuned", "edgeload-tuned")
WARMUP_S = 1.0


class JpegDataset:
    """In-memory JPEGs decoded and resized per sample, with a little Python per sample."""

    def __init__(self, count: int = 256) -> None:
        import cv2

        rng = np.random.default_rng(0)
        self.blobs = []
        for i in range(count):
            img = np.full((240, 320, 3), i % 255, np.uint8)
            img[::8] = rng.integers(0, 255, (30, 320, 3), dtype=np.uint8)
            self.blobs.append(cv2.imencode(".jpg", img)[1].tobytes())

    def __len__(self) -> int:
        return len(self.blobs)

    def __getitem__(self, i: int) -> tuple[np.ndarray, int]:
        import cv2

        img = cv2.imdecode(np.frombuffer(self.blobs[i], np.uint8), cv2.IMREAD_COLOR)
        out = cv2.resize(img, (128, 128))
        label = sum(ord(c) for c in f"sample-{i}" * 20) % 10  # GIL-bound bookkeeping
        return out, label


class PythonDataset:
    """Samples made by pure Python (GIL-bound), like a hand-written parser or augmenter."""

    def __len__(self) -> int:
        return 512

    def __getitem__(self, i: int) -> tuple[np.ndarray, int]:
        acc = 0
        for k in range(6000):  # about 1 ms of bytecode on this box
            acc = (acc * 31 + k + i) % 1000003
        return np.full((64, 64, 3), acc % 255, np.uint8), acc % 10


def make_clips(directory: Path, count: int = 4) -> list[str]:
    """Write (once) ``count`` 320x240 H.264 clips of 3 s; return their paths."""
    paths = []
    for i in range(count):
        path = directory / f"clip{i}.mp4"
        if not path.exists():
            subprocess.run(
                ["ffmpeg", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                 "testsrc2=size=320x240:rate=30", "-t", "3", "-c:v", "libx264", "-preset",
                 "ultrafast", "-pix_fmt", "yuv420p", "-g", "30", str(path)],
                check=True, timeout=60,
            )  # fmt: skip
        paths.append(str(path))
    return paths


# --- one contender, in a child process --------------------------------------------------


def _iterate(batches: Any, seconds: float, latency_of: Any) -> dict[str, Any]:
    from edgeload.measure import PeakPss, percentile

    lat: list[float] = []
    items = 0
    with PeakPss() as mem:
        it = iter(batches)
        warm_until = None
        began = None
        while True:
            asked = time.monotonic()
            batch = next(it)
            now = time.monotonic()
            warm_until = warm_until or now + WARMUP_S
            if now < warm_until:
                continue
            if began is None:
                began = now
                continue
            n, ages = latency_of(batch)
            items += n
            lat.extend(ages if ages is not None else [(now - asked) * 1000])
            if now - began >= seconds:
                break
        elapsed = time.monotonic() - began
    return {"items_per_s": items / elapsed, "p50_ms": percentile(lat, 50),
            "p99_ms": percentile(lat, 99), "pss_bytes": mem.peak_bytes}  # fmt: skip


def _forever(loader: Any) -> Any:
    while True:
        yield from loader


def child_dataset(kind: str, name: str, seconds: float) -> dict[str, Any]:
    import torch

    import benchmarks.bench_autotune as me  # pickled by module name, not __main__

    ds = me.JpegDataset() if kind == "dataset" else me.PythonDataset()
    cores = len(os.sched_getaffinity(0))
    if name.startswith("torch"):
        kw = {} if name == "torch-defaults" else {"num_workers": cores, "persistent_workers": True}
        loader = torch.utils.data.DataLoader(ds, batch_size=32, **kw)
    else:
        import edgeload

        loader = edgeload.DataLoader(ds, batch_size=32, num_workers="auto",
                                     persistent_workers=True)  # fmt: skip
    out = _iterate(_forever(loader), seconds, lambda b: (len(b[1]), None))
    if name.startswith("torch"):
        out["config"] = f"{loader.num_workers} x process"
    else:  # what the plan resolved "auto" to
        out["config"] = f"{loader._num_workers_resolved} x {loader.worker_kind_resolved}"
    return out


def child_video(name: str, seconds: float, clips: list[str]) -> dict[str, Any]:
    if name == "opencv-loop":
        return _iterate(_opencv_loop(clips), seconds, lambda b: (len(b), None))
    from edgeload.video import StreamLoader, VideoSource

    sources = [VideoSource(c, loop=True) for c in clips]
    with StreamLoader(sources, size=(160, 160), batch=4) as loader:
        out = _iterate(loader, seconds,
                       lambda b: (len(b.meta), [m.age_ms for m in b.meta if m]))  # fmt: skip
        t = loader.plan.threads
        out["config"] = f"slots {loader.plan.slot_count}, ffmpeg {t.ffmpeg}, torch {t.torch}"
    return out


def _opencv_loop(clips: list[str]) -> Any:
    from benchmarks._common import plain_batches

    return plain_batches(clips, (160, 160))


# --- the driver ---------------------------------------------------------------------------


def _run_child(kind: str, name: str, seconds: float, profile: Path, clips: list[str]) -> Any:
    env = {**os.environ, "EDGELOAD_PROFILE": str(profile), "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "benchmarks.bench_autotune", "--child", kind, name,
           "--seconds", str(seconds), "--clips", *clips]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"{kind}/{name} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def tune(kind: str, budget: float, trial: float, clips: list[str], out: Path) -> Any:
    import edgeload
    from benchmarks.bench_autotune import JpegDataset, PythonDataset

    if kind == "dataset":
        work: Any = edgeload.tuning.DatasetWorkload(JpegDataset(), batch_size=32, name="jpeg")
    elif kind == "dataset-py":
        work = edgeload.tuning.DatasetWorkload(PythonDataset(), batch_size=32, name="python")
    else:
        work = edgeload.tuning.VideoWorkload(clips, size=(160, 160), batch=4)
    result = edgeload.autotune(work, trial_seconds=trial, budget_seconds=budget)
    result.write(out)
    return result


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The benchmark's options (also ``scripts/bench.py autotune``)."""
    p.add_argument("--budget", type=float, default=90.0, help="autotune budget per workload, s")
    p.add_argument("--trial", type=float, default=2.0, help="autotune trial length, s")
    p.add_argument("--seconds", type=float, default=3.0, help="measured seconds per run")
    p.add_argument("--repeats", type=int, default=3, help="rounds of all contenders")
    p.add_argument("--workloads", nargs="+", default=["dataset", "dataset-py", "video"],
                   choices=["dataset", "dataset-py", "video"])  # fmt: skip
    p.add_argument("--json", action="store_true")
    p.add_argument("--child", nargs=2, metavar=("KIND", "NAME"), help=argparse.SUPPRESS)
    p.add_argument("--clips", nargs="*", default=[], help=argparse.SUPPRESS)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(p)
    return run(p.parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """Tune each workload, then measure every contender; print the table."""
    if args.child:
        kind, name = args.child
        got = (child_dataset(kind, name, args.seconds) if kind.startswith("dataset")
               else child_video(name, args.seconds, args.clips))  # fmt: skip
        print(json.dumps(got, default=str))
        return 0
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="edgeload-bench-autotune-") as tmp:
        root = Path(tmp)
        clips = make_clips(root)
        empty = root / "untuned.toml"
        empty.write_text("# no settings: the untuned plan\n")
        for kind in args.workloads:
            tuned = root / f"{kind}.toml"
            result = tune(kind, args.budget, args.trial, clips, tuned)
            print(f"[{kind}] autotune: {len(result.trials)} trials in {result.elapsed_s:.0f} s;"
                  f" {result.reason}\n{tuned.read_text()}", file=sys.stderr)  # fmt: skip
            names = DATASET if kind.startswith("dataset") else VIDEO

            def run_one(name: str, _round: int) -> Any:
                profile = tuned if name == "edgeload-tuned" else empty  # noqa: B023
                return _run_child(kind, name, args.seconds, profile, clips)  # noqa: B023

            # Each round's order rotated: going first in a round is slowest on this box.
            runs, orders = interleave(names, args.repeats, run_one)
            rows.extend(_summarise(kind, names, runs, orders))
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'workload':<8} {'contender':<17} {'items/s':>9} {'x base':>7} {'p50 ms':>7} "
          f"{'p99 ms':>7} {'PSS MiB':>8}  config")  # fmt: skip
    for r in rows:
        print(f"{r['workload']:<8} {r['contender']:<17} {r['items_per_s']:>9.1f} "
              f"{r['ratio']:>6.2f}x {r['p50_ms']:>7.1f} {r['p99_ms']:>7.1f} "
              f"{r['pss_bytes'] / 2**20:>8.0f}  {r['config'] or ''}")  # fmt: skip
    print(
        f"medians of {args.repeats} runs of {args.seconds:g} s; x base: items/s over the "
        "first contender (torch defaults / the OpenCV loop)"
    )
    return 0


def _summarise(
    kind: str, names: tuple[str, ...], runs: dict[str, list[Any]], orders: list[list[str]]
) -> list[Any]:
    rows = []
    for name in names:
        got = runs[name]
        rows.append({
            "workload": kind, "contender": name,
            "items_per_s": statistics.median(r["items_per_s"] for r in got),
            "p50_ms": statistics.median(r["p50_ms"] for r in got),
            "p99_ms": statistics.median(r["p99_ms"] for r in got),
            "pss_bytes": statistics.median(r["pss_bytes"] for r in got),
            "runs_items_per_s": [round(r["items_per_s"], 1) for r in got],
            "config": got[-1].get("config"), "round_orders": orders,
        })  # fmt: skip
    base = rows[0]["items_per_s"]
    for row in rows:
        row["ratio"] = row["items_per_s"] / base
    return rows


if __name__ == "__main__":
    sys.exit(main())
