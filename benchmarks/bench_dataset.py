"""Dataset loading: in-memory JPEGs decoded and resized with OpenCV, edgeload vs torch.

Workload: ``--images`` (2,000) synthetic 640x480 JPEGs held in memory (one numpy
buffer plus offsets, so forked workers share it without copy-on-write churn), each
decoded with ``cv2.imdecode`` and resized to 224x224, batches of 32 ``(uint8 image,
int label)``.  Modes, each in its own fresh process so memory is measured alone:

- ``edgeload``: ``edgeload.DataLoader(num_workers="auto")`` - whatever the plan picks.
- ``torch-0``: ``torch.utils.data.DataLoader(num_workers=0)``.
- ``torch-fork-2`` / ``torch-spawn-2``: 2 worker processes, forked / spawned.

Reported per mode (median of ``--repeats`` runs): images/s over one epoch including
worker start-up (what a user waits for), images/s after the first batch, and the peak
PSS of the mode's process tree, sampled from outside every 50 ms.  Ratios are against
the best torch mode (speed) and torch with 0 workers (memory).

Run: ``python benchmarks/bench_dataset.py [--images 2000] [--repeats 3] [--out r.json]``
(or ``python scripts/bench.py dataset``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import zlib
from typing import Any

import numpy as np

from edgeload._compat import zip_strict

MODES = ("edgeload", "torch-0", "torch-fork-2", "torch-spawn-2")
_CHILD_TIMEOUT_S = 600


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The benchmark's options (shared with ``scripts/bench.py dataset``)."""
    parser.add_argument("--images", type=int, default=2000, help="JPEGs in the dataset")
    parser.add_argument("--batch", type=int, default=32, help="batch size")
    parser.add_argument("--size", type=int, nargs=2, default=(640, 480), metavar=("W", "H"))
    parser.add_argument("--out-size", type=int, default=224, help="resized side, pixels")
    parser.add_argument("--repeats", type=int, default=3, help="runs per mode (median)")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--out", help="write the results as JSON here")


def make_jpegs(count: int, width: int, height: int) -> tuple[np.ndarray, np.ndarray]:
    """``count`` synthetic photos-like JPEGs: one byte buffer and ``count + 1`` offsets."""
    import cv2

    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    chunks, offsets = [], [0]
    for i in range(count):
        base = np.stack(
            [(xx * (i % 7 + 1) / 8) % 256, (yy * (i % 5 + 1) / 6) % 256, (xx + yy + 9 * i) % 256],
            axis=-1,
        )
        img = base.astype(np.uint8)
        for _ in range(6):
            x0, y0 = int(rng.integers(0, width - 80)), int(rng.integers(0, height - 80))
            colour = tuple(int(c) for c in rng.integers(0, 256, 3))
            cv2.rectangle(img, (x0, y0), (x0 + 80, y0 + 60), colour, -1)
        img = cv2.add(img, rng.integers(0, 12, img.shape, dtype=np.uint8))
        ok, enc = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 90])
        if not ok:
            raise RuntimeError("cv2.imencode failed")
        chunks.append(enc.reshape(-1))
        offsets.append(offsets[-1] + enc.size)
    return np.concatenate(chunks), np.asarray(offsets, dtype=np.int64)


class JpegDataset:
    """Map-style: decode JPEG ``i`` from memory, resize, return ``(HWC uint8, label)``."""

    def __init__(self, path: str, out_size: int) -> None:
        data = np.load(path)
        self.buffer = np.ascontiguousarray(data["buffer"])
        self.offsets = data["offsets"]
        self.out_size = out_size

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> tuple[np.ndarray, int]:
        import cv2

        raw = self.buffer[self.offsets[i] : self.offsets[i + 1]]
        img = cv2.imdecode(raw, cv2.IMREAD_COLOR)
        img = cv2.resize(img, (self.out_size, self.out_size), interpolation=cv2.INTER_AREA)
        return img, i % 10


def _child(mode: str, path: str, batch: int, out_size: int) -> dict[str, Any]:
    """One epoch in this process; returns timings (run with ``--child``)."""
    import cv2  # noqa: F401 - loaded before timing, as in a real program
    import torch

    from edgeload import DataLoader as EdgeLoader

    dataset = JpegDataset(path, out_size)
    cpu0 = _cpu_s()
    start = time.perf_counter()
    if mode == "edgeload":
        loader: Any = EdgeLoader(dataset, batch_size=batch, num_workers="auto")
    elif mode == "torch-0":
        loader = torch.utils.data.DataLoader(dataset, batch_size=batch, num_workers=0)
    else:
        method = mode.split("-")[1]
        loader = torch.utils.data.DataLoader(
            dataset, batch_size=batch, num_workers=2, multiprocessing_context=method
        )
    images, first = 0, None
    # A CRC of every byte of every batch, in order: equal across modes means edgeload
    # delivered exactly torch's batches (same pixels, labels and order).
    checksum = 0
    for imgs, labels in loader:
        if first is None:
            first = time.perf_counter()
        images += int(labels.shape[0])
        checksum = zlib.crc32(imgs.numpy().tobytes(), checksum)
        checksum = zlib.crc32(labels.numpy().tobytes(), checksum)
    end = time.perf_counter()
    chosen = {}
    if mode == "edgeload":
        stats = loader.stats()
        chosen = {"num_workers": stats["num_workers"], "worker_kind": stats["worker_kind"]}
        loader.close()
    del loader  # torch joins (and so reaps) its workers: their CPU time is counted
    cpu = _cpu_s() - cpu0
    return {
        "cpu_ms_per_image": 1e3 * cpu / max(images, 1),
        "images": images,
        "seconds": end - start,
        "first_batch_s": (first or end) - start,
        "steady_images_per_s": (images - batch) / max(end - (first or end), 1e-9),
        "checksum": checksum,
        **chosen,
    }


def _cpu_s() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _run_child(mode: str, path: str, args: argparse.Namespace) -> dict[str, Any]:
    from edgeload.measure import run_measured

    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        mode,
        "--data",
        path,
        "--batch",
        str(args.batch),
        "--out-size",
        str(args.out_size),
    ]
    out, peak = run_measured(cmd, timeout_s=_CHILD_TIMEOUT_S)
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    result["peak_pss_bytes"] = peak
    return result


def run(args: argparse.Namespace) -> int:
    """Build the dataset, run every mode ``--repeats`` times, print and save the table."""
    width, height = args.size
    t0 = time.perf_counter()
    buffer, offsets = make_jpegs(args.images, width, height)
    print(
        f"{args.images} JPEGs {width}x{height}, {buffer.nbytes / 2**20:.1f} MiB in memory "
        f"(made in {time.perf_counter() - t0:.1f} s); batch {args.batch}, -> "
        f"{args.out_size}x{args.out_size}; {os.cpu_count()} CPUs",
        flush=True,
    )
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in args.modes}
    with tempfile.TemporaryDirectory(prefix="edgeload-bench-") as tmp:
        path = os.path.join(tmp, "jpegs.npz")
        np.savez(path, buffer=buffer, offsets=offsets)
        for rep in range(args.repeats):
            # Interleave the modes, so drift in a shared machine's load hits all alike.
            for mode in args.modes:
                r = _run_child(mode, path, args)
                runs[mode].append(r)
                print(
                    f"  [{rep + 1}/{args.repeats}] {mode:<14} {r['images'] / r['seconds']:7.0f} "
                    f"img/s  peak PSS {r['peak_pss_bytes'] / 2**20:6.0f} MiB  "
                    f"CPU {r['cpu_ms_per_image']:.2f} ms/img",
                    flush=True,
                )
    report = _summarise(runs, args)
    _print(report)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
    return 0


def _summarise(runs: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> dict[str, Any]:
    modes = {}
    for mode, rs in runs.items():
        checks = {r["checksum"] for r in rs}
        if len(checks) != 1 or any(r["images"] != args.images for r in rs):
            raise RuntimeError(f"{mode}: runs disagree on the data ({checks}); a loader is wrong")
        modes[mode] = {
            "images_per_s": statistics.median(r["images"] / r["seconds"] for r in rs),
            "steady_images_per_s": statistics.median(r["steady_images_per_s"] for r in rs),
            "first_batch_s": statistics.median(r["first_batch_s"] for r in rs),
            "peak_pss_mib": statistics.median(r["peak_pss_bytes"] for r in rs) / 2**20,
            "cpu_ms_per_image": statistics.median(r["cpu_ms_per_image"] for r in rs),
            **{k: rs[0][k] for k in ("num_workers", "worker_kind") if k in rs[0]},
        }
    digests = {mode: rs[0]["checksum"] for mode, rs in runs.items()}
    if len(set(digests.values())) > 1:
        raise RuntimeError(f"the modes delivered different batches (CRC per mode: {digests})")
    torch_modes = [m for m in modes if m.startswith("torch")]
    best = max(torch_modes, key=lambda m: modes[m]["images_per_s"], default=None)
    workload = {k: v for k, v in vars(args).items() if isinstance(v, (int, str, list, tuple))}
    report: dict[str, Any] = {"workload": workload | {"cpus": os.cpu_count()}, "modes": modes}
    if "edgeload" in modes and best is not None:
        report["best_torch"] = best
        report["speed_vs_best_torch"] = (
            modes["edgeload"]["images_per_s"] / modes[best]["images_per_s"]
        )
        # Within a round the modes ran back to back: a ratio per round cancels slow
        # drifts in a shared machine's load better than a ratio of medians.
        per_round = [
            (e["images"] / e["seconds"]) / (t["images"] / t["seconds"])
            for e, t in zip_strict(runs["edgeload"], runs[best])
        ]
        report["speed_vs_best_torch_per_round"] = per_round
        report["speed_vs_best_torch_round_median"] = statistics.median(per_round)
    if "edgeload" in modes and "torch-0" in modes:
        report["pss_vs_torch_0"] = (
            modes["edgeload"]["peak_pss_mib"] / modes["torch-0"]["peak_pss_mib"]
        )
    return report


def _print(report: dict[str, Any]) -> None:
    print(
        f"\n{'mode':<14} {'img/s':>7} {'steady':>7} {'1st batch':>9} {'peak PSS':>9} {'CPU/img':>8}"
    )
    for mode, m in report["modes"].items():
        print(
            f"{mode:<14} {m['images_per_s']:7.0f} {m['steady_images_per_s']:7.0f} "
            f"{m['first_batch_s']:8.2f}s {m['peak_pss_mib']:6.0f} MiB "
            f"{m['cpu_ms_per_image']:6.2f}ms"
        )
    if "speed_vs_best_torch" in report:
        rounds = ", ".join(f"{r:.2f}" for r in report["speed_vs_best_torch_per_round"])
        print(
            f"edgeload speed vs best torch ({report['best_torch']}): "
            f"{report['speed_vs_best_torch']:.2f}x of medians, "
            f"{report['speed_vs_best_torch_round_median']:.2f}x median per round "
            f"({rounds}) (target >= 1.15x)"
        )
    if "pss_vs_torch_0" in report:
        print(f"edgeload peak PSS vs torch-0: {report['pss_vs_torch_0']:.2f}x (target <= 1.1x)")


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.child, args.data, args.batch, args.out_size)))
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
