"""Dataset loading: in-memory JPEGs decoded and resized with OpenCV, edgeload vs torch.

Workload: ``--images`` (2,000) synthetic 640x480 JPEGs held in memory (one numpy
buffer plus offsets, so forked workers share it without copy-on-write churn), each
decoded with ``cv2.imdecode`` and resized to 224x224, batches of 32 ``(uint8 image,
int label)``.  Modes, each in its own fresh process so memory is measured alone:

- ``edgeload``: ``edgeload.DataLoader(num_workers="auto")`` - whatever the plan picks.
- ``edgeload-pf1``: the same with ``prefetch_factor=1`` (one task in flight per worker:
  two batch slots less; not in the default modes).
- ``torch-0``: ``torch.utils.data.DataLoader(num_workers=0)``.
- ``torch-fork-2`` / ``torch-spawn-2``: 2 worker processes, forked / spawned.
- ``threads-2``: the bound for any two-worker loader, no loader at all: two bare threads
  (one cv2 thread each, as edgeload's plan gives them) each decode every other batch
  straight into a fresh array, at most two batches ahead per thread (edgeload's default
  depth), and the main thread takes them in order.  No generality, no per-worker seeds,
  no fault handling: its speed over fork-2 and its memory over torch-0 are what two
  workers reading ahead give and cost on this box, whatever the loader.
- ``threads-2-pf1``: the same, one batch ahead per thread (not in the default modes).

Reported per mode (median of ``--repeats`` runs): images/s over one epoch including
worker start-up (what a user waits for), images/s after the first batch, CPU ms per
image over the process tree (reaped workers included), and the peak PSS of the mode's
process tree, sampled from outside every 50 ms, with its anonymous + shared-memory
part (the file-backed rest moves with what else on the box maps torch and cv2).
Speed is compared with the best torch mode twice: by wall time (images/s), and by CPU
time per image, which a shared, loaded machine distorts far less.  Memory is compared
with torch's 0 workers.  Beside them, edgeload against the bare threads (speed per
round, own PSS): the part of the two-worker bound the loader reaches, and what it adds.

The consumer does nothing else by default; ``--step-ms`` makes it wait that long per
batch (a GPU step) and ``--stall-ms`` adds a longer wait every 8th batch (logging, a
checkpoint), where a loader shows how many batches it keeps ready.

Every run takes a CRC of every byte of every batch (shape, dtype, pixels and labels),
batch by batch; the run fails unless each mode delivered the whole epoch and
edgeload's batches equal torch's, batch for batch.

Run: ``python benchmarks/bench_dataset.py [--images 2000] [--repeats 3] [--out r.json]``
(or ``python scripts/bench.py dataset``).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from benchmarks._common import interleave

# No edgeload import at module level: this file is also each mode's child process, and a
# torch mode's process must hold only what a torch program holds (edgeload's modules
# would add their ~2-4 MiB to the PSS it is compared by).

MODES = ("edgeload", "torch-0", "torch-fork-2", "torch-spawn-2", "threads-2")
EXTRA_MODES = ("edgeload-pf1", "threads-2-pf1")
_CHILD_TIMEOUT_S = 600
# The bare two-thread bound: its threads, batches each may read ahead per mode, and the
# longest it waits for a batch or a turn before calling it a hang
_BARE_THREADS = 2
_BARE_AHEAD = {"threads-2": 2, "threads-2-pf1": 1}
_BARE_WAIT_S = 60.0
# --stall-ms lengthens every this-many-th step of the consumer
_STALL_EVERY = 8
# Issue 14's targets: edgeload's speed vs the best torch mode, its PSS vs torch-0's.
SPEED_TARGET = 1.25
PSS_TARGET = 1.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The benchmark's options (shared with ``scripts/bench.py dataset``)."""
    parser.add_argument("--images", type=int, default=2000, help="JPEGs in the dataset")
    parser.add_argument("--batch", type=int, default=32, help="batch size")
    parser.add_argument("--size", type=int, nargs=2, default=(640, 480), metavar=("W", "H"))
    parser.add_argument("--out-size", type=int, default=224, help="resized side, pixels")
    parser.add_argument(
        "--step-ms",
        type=float,
        default=0.0,
        help="the consumer's time per batch, a sleep standing for a GPU step (default 0)",
    )
    parser.add_argument(
        "--stall-ms",
        type=float,
        default=0.0,
        help=f"added to every {_STALL_EVERY}th step, as logging or a checkpoint does (default 0)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="runs per mode (median)")
    parser.add_argument("--modes", nargs="+", choices=MODES + EXTRA_MODES, default=list(MODES))
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


def bare_threads(dataset: Any, batch: int, workers: int, ahead: int) -> Iterator[Any]:
    """Batches of ``dataset`` in order, read by ``workers`` bare threads (``threads-2``).

    Thread ``w`` reads batches ``w, w + workers, ...``, each into a fresh array, and
    starts batch ``b`` only once it is fewer than ``workers * ahead`` batches past the
    one the caller waits for.  Yields ``(images, labels)`` tensors, as torch's
    ``default_collate`` makes them for this dataset.  A failed read raises here; closing
    the generator early stops and joins the threads.
    """
    import cv2
    import torch

    cv2.setNumThreads(1)
    n = len(dataset)
    n_batches = -(-n // batch)
    done: dict[int, Any] = {}
    cond = threading.Condition()
    state: dict[str, Any] = {"next": 0, "error": None, "stop": False}

    def let_in(b: int) -> Callable[[], bool]:
        return lambda: b < state["next"] + workers * ahead or state["stop"]

    def ready(b: int) -> Callable[[], bool]:
        return lambda: b in done or state["error"] is not None

    def work(w: int) -> None:
        b = w
        try:
            for b in range(w, n_batches, workers):
                with cond:
                    if not cond.wait_for(let_in(b), _BARE_WAIT_S):
                        raise TimeoutError(f"bare thread {w}: batch {b} never let in")
                    if state["stop"]:
                        return
                rows = range(b * batch, min(n, (b + 1) * batch))
                images = labels = None
                for r, i in enumerate(rows):
                    img, label = dataset[i]
                    if images is None:
                        images = np.empty((len(rows), *img.shape), img.dtype)
                        labels = np.empty(len(rows), np.int64)
                    images[r] = img
                    labels[r] = label
                with cond:
                    done[b] = (torch.from_numpy(images), torch.from_numpy(labels))
                    cond.notify_all()
        except BaseException as exc:  # the main thread raises it
            with cond:
                state["error"] = (f"bare thread {w}: batch {b} failed", exc)
                cond.notify_all()

    threads = [
        threading.Thread(target=work, args=(w,), name=f"bench-bare-{w}", daemon=True)
        for w in range(workers)
    ]
    for t in threads:
        t.start()
    try:
        for b in range(n_batches):
            with cond:
                if not cond.wait_for(ready(b), _BARE_WAIT_S):
                    raise TimeoutError(f"bare threads: batch {b} not read in {_BARE_WAIT_S} s")
                if state["error"] is not None:
                    what, exc = state["error"]
                    raise RuntimeError(what) from exc
                item = done.pop(b)
                state["next"] = b + 1
                cond.notify_all()
            yield item
            del item  # while the caller waits, its reference is the only one
    finally:
        with cond:
            state["stop"] = True
            cond.notify_all()
        for t in threads:
            t.join(_BARE_WAIT_S)


def _child(
    mode: str, path: str, batch: int, out_size: int, step_ms: float = 0.0, stall_ms: float = 0.0
) -> dict[str, Any]:
    """One epoch in this process; returns timings (run with ``--child``)."""
    import cv2  # noqa: F401 - loaded before timing, as in a real program
    import torch

    if mode.startswith("edgeload"):
        import edgeload.platform  # noqa: F401 - the loader's first use loads it; torch's loads with torch
        from edgeload import DataLoader as EdgeLoader

    dataset = JpegDataset(path, out_size)
    # The imports leave a collection due (a full one takes ~70 ms with torch loaded):
    # pay it before the clock in every mode, not in whichever mode allocates first.
    gc.collect()
    cpu0 = _cpu_s()
    start = time.perf_counter()
    if mode == "edgeload":
        loader: Any = EdgeLoader(dataset, batch_size=batch, num_workers="auto")
    elif mode == "edgeload-pf1":
        loader = EdgeLoader(dataset, batch_size=batch, num_workers="auto", prefetch_factor=1)
    elif mode == "torch-0":
        loader = torch.utils.data.DataLoader(dataset, batch_size=batch, num_workers=0)
    elif mode in _BARE_AHEAD:
        loader = bare_threads(dataset, batch, _BARE_THREADS, _BARE_AHEAD[mode])
    else:
        method = mode.split("-")[1]
        loader = torch.utils.data.DataLoader(
            dataset, batch_size=batch, num_workers=2, multiprocessing_context=method
        )
    images, first = 0, None
    # One CRC per batch over its shape, dtype and every byte: equal lists across modes
    # mean edgeload delivered exactly torch's batches (same pixels, labels and order).
    crcs = []
    for imgs, labels in loader:
        if first is None:
            first = time.perf_counter()
        images += int(labels.shape[0])
        crcs.append(_batch_crc(imgs.numpy(), labels.numpy()))
        wait_ms = step_ms + (stall_ms if len(crcs) % _STALL_EVERY == 0 else 0.0)
        if wait_ms:
            time.sleep(wait_ms / 1e3)
    end = time.perf_counter()
    chosen = {}
    if mode.startswith("edgeload"):
        stats = loader.stats()
        chosen = {k: stats.get(k) for k in ("num_workers", "worker_kind", "slots")}
        loader.close()
    del loader  # torch joins (and so reaps) its workers: their CPU time is counted
    cpu = _cpu_s() - cpu0
    return {
        "cpu_ms_per_image": 1e3 * cpu / max(images, 1),
        "images": images,
        "seconds": end - start,
        "first_batch_s": (first or end) - start,
        "steady_images_per_s": (images - batch) / max(end - (first or end), 1e-9),
        "batch_crcs": crcs,
        "edgeload_loaded": "edgeload" in sys.modules,
        **chosen,
    }


def _batch_crc(imgs: np.ndarray, labels: np.ndarray) -> int:
    crc = 0
    for arr in (imgs, labels):
        crc = zlib.crc32(f"{arr.shape}{arr.dtype.str}".encode(), crc)
        crc = zlib.crc32(np.ascontiguousarray(arr).tobytes(), crc)
    return crc


def _cpu_s() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _run_child(mode: str, path: str, args: argparse.Namespace) -> dict[str, Any]:
    # The peak of the tree's PSS and of its own (anonymous + shared-memory) part: the rest
    # is library pages, whose PSS falls whenever another process on a shared box maps the
    # same torch and cv2 files (it moved torch-0's total between 319 and 358 MiB in a run).
    from edgeload.measure import PeakPss, run_sampled

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
        "--step-ms",
        str(args.step_ms),
        "--stall-ms",
        str(args.stall_ms),
    ]
    out, mem = run_sampled(cmd, timeout_s=_CHILD_TIMEOUT_S, sampler=PeakPss)
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    result["peak_pss_bytes"] = mem.peak_bytes
    result["peak_own_pss_bytes"] = mem.peak_own_bytes
    if result["edgeload_loaded"] != mode.startswith("edgeload"):
        raise RuntimeError(f"{mode}: edgeload loaded = {result['edgeload_loaded']} in its process")
    return result


def run(args: argparse.Namespace) -> int:
    """Build the dataset, run every mode ``--repeats`` times, print and save the table."""
    width, height = args.size
    t0 = time.perf_counter()
    buffer, offsets = make_jpegs(args.images, width, height)
    print(
        f"{args.images} JPEGs {width}x{height}, {buffer.nbytes / 2**20:.1f} MiB in memory "
        f"(made in {time.perf_counter() - t0:.1f} s); batch {args.batch}, -> "
        f"{args.out_size}x{args.out_size}; {os.cpu_count()} CPUs; consumer step "
        f"{args.step_ms:g} ms, +{args.stall_ms:g} ms every {_STALL_EVERY}th",
        flush=True,
    )
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="edgeload-bench-") as tmp:
        path = os.path.join(tmp, "jpegs.npz")
        np.savez(path, buffer=buffer, offsets=offsets)

        def run_one(mode: str, rep: int) -> dict[str, Any]:
            r = _run_child(mode, path, args)
            print(
                f"  [{rep + 1}/{args.repeats}] {mode:<14} {r['images'] / r['seconds']:7.0f} "
                f"img/s  peak PSS {r['peak_pss_bytes'] / 2**20:6.0f} MiB "
                f"(own {r['peak_own_pss_bytes'] / 2**20:4.0f})  "
                f"CPU {r['cpu_ms_per_image']:.2f} ms/img",
                flush=True,
            )
            return r

        # Interleave the modes, so drift in a shared machine's load hits all alike, and
        # rotate each round's order, so going first (slowest, on this box) does too.
        runs, orders = interleave(args.modes, args.repeats, run_one)
    report = _summarise(runs, args)
    report["load_average_before"] = list(load_before)
    report["round_orders"] = orders
    _print(report)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
    return 0


def _summarise(runs: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> dict[str, Any]:
    from edgeload._compat import zip_strict

    equality = check_batches(runs, images=args.images, batch=args.batch)
    modes = {}
    for mode, rs in runs.items():
        modes[mode] = {
            "images_per_s": statistics.median(r["images"] / r["seconds"] for r in rs),
            "images_per_s_runs": [r["images"] / r["seconds"] for r in rs],
            "own_pss_mib_runs": [r["peak_own_pss_bytes"] / 2**20 for r in rs],
            "steady_images_per_s": statistics.median(r["steady_images_per_s"] for r in rs),
            "first_batch_s": statistics.median(r["first_batch_s"] for r in rs),
            "peak_pss_mib": statistics.median(r["peak_pss_bytes"] for r in rs) / 2**20,
            "peak_own_pss_mib": statistics.median(r["peak_own_pss_bytes"] for r in rs) / 2**20,
            "cpu_ms_per_image": statistics.median(r["cpu_ms_per_image"] for r in rs),
            **{k: rs[0][k] for k in ("num_workers", "worker_kind", "slots") if k in rs[0]},
        }
    torch_modes = [m for m in modes if m.startswith("torch")]
    workload = {k: v for k, v in vars(args).items() if isinstance(v, (int, str, list, tuple))}
    report: dict[str, Any] = {
        "workload": {**workload, "cpus": os.cpu_count()},
        "load_average": list(os.getloadavg()),
        "equality": equality,
        "modes": modes,
    }
    if "edgeload" in modes and torch_modes:
        e = modes["edgeload"]
        best = max(torch_modes, key=lambda m: modes[m]["images_per_s"])
        report["best_torch"] = best
        report["speed_vs_best_torch"] = e["images_per_s"] / modes[best]["images_per_s"]
        # Within a round the modes ran back to back: a ratio per round cancels slow
        # drifts in a shared machine's load better than a ratio of medians.
        per_round = [
            (e_run["images"] / e_run["seconds"]) / (t["images"] / t["seconds"])
            for e_run, t in zip_strict(runs["edgeload"], runs[best])
        ]
        report["speed_vs_best_torch_per_round"] = per_round
        report["speed_vs_best_torch_round_median"] = statistics.median(per_round)
        # CPU time per image: what the same work costs, which other jobs on the box
        # change far less than the wall time (the best torch mode here is the cheapest).
        cheapest = min(torch_modes, key=lambda m: modes[m]["cpu_ms_per_image"])
        report["cheapest_torch"] = cheapest
        report["cpu_speed_vs_cheapest_torch"] = (
            modes[cheapest]["cpu_ms_per_image"] / e["cpu_ms_per_image"]
        )
        report["cpu_speed_vs_best_torch"] = modes[best]["cpu_ms_per_image"] / e["cpu_ms_per_image"]
    if "edgeload" in modes and "torch-0" in modes:
        report["pss_vs_torch_0"] = (
            modes["edgeload"]["peak_pss_mib"] / modes["torch-0"]["peak_pss_mib"]
        )
        report["own_pss_vs_torch_0"] = (
            modes["edgeload"]["peak_own_pss_mib"] / modes["torch-0"]["peak_own_pss_mib"]
        )
        # The file-backed part is the same code in both (one process each): the
        # difference of the own parts is what edgeload adds.
        report["own_pss_minus_torch_0_mib"] = (
            modes["edgeload"]["peak_own_pss_mib"] - modes["torch-0"]["peak_own_pss_mib"]
        )
    if "edgeload" in modes and "threads-2" in modes:
        # The bare two-thread bound: what part of it edgeload reaches, and what it adds
        e, bare = modes["edgeload"], modes["threads-2"]
        report["speed_vs_threads_2"] = e["images_per_s"] / bare["images_per_s"]
        report["speed_vs_threads_2_per_round"] = [
            (a["images"] / a["seconds"]) / (b["images"] / b["seconds"])
            for a, b in zip_strict(runs["edgeload"], runs["threads-2"])
        ]
        report["own_pss_minus_threads_2_mib"] = e["peak_own_pss_mib"] - bare["peak_own_pss_mib"]
        if torch_modes:
            best = report["best_torch"]
            report["threads_2_vs_best_torch"] = bare["images_per_s"] / modes[best]["images_per_s"]
        if "torch-0" in modes:
            report["threads_2_own_pss_minus_torch_0_mib"] = (
                bare["peak_own_pss_mib"] - modes["torch-0"]["peak_own_pss_mib"]
            )
    return report


def check_batches(runs: dict[str, list[dict[str, Any]]], *, images: int, batch: int) -> str:
    """Fail unless every run delivered the whole epoch and all runs' batches are equal.

    Returns what was checked, in words.

    Raises:
        RuntimeError: a run is short, or two runs differ (the first differing batch named).
    """
    from edgeload._compat import zip_strict

    want_batches = -(-images // batch)
    reference = next((m for m in ("torch-0", *runs) if m in runs and m.startswith("torch")), None)
    ref_mode = reference or next(iter(runs))
    want = runs[ref_mode][0]["batch_crcs"]
    for mode, rs in runs.items():
        for i, r in enumerate(rs):
            got = r["batch_crcs"]
            if r["images"] != images or len(got) != want_batches:
                raise RuntimeError(
                    f"{mode} run {i + 1}: {r['images']} images in {len(got)} batches, "
                    f"expected {images} in {want_batches}; a loader dropped or added data"
                )
            bad = next((k for k, (a, b) in enumerate(zip_strict(got, want)) if a != b), None)
            if bad is not None:
                raise RuntimeError(
                    f"{mode} run {i + 1}: batch {bad} differs from {ref_mode}'s "
                    f"(CRC {got[bad]:#010x} vs {want[bad]:#010x}); a loader is wrong"
                )
    runs_n = sum(len(rs) for rs in runs.values())
    if reference is None:
        print("WARNING: no torch mode ran: edgeload's batches were NOT checked against torch's")
        return f"not checked against torch (no torch mode); {runs_n} runs agree with each other"
    return (
        f"all {runs_n} runs' {want_batches} batches equal {reference}'s, byte for byte "
        f"(CRC of shape, dtype, pixels and labels per batch)"
    )


def _print(report: dict[str, Any]) -> None:
    print(
        f"\n{'mode':<14} {'img/s':>7} {'steady':>7} {'1st batch':>9} {'peak PSS':>9} "
        f"{'(own)':>9} {'CPU/img':>8}"
    )
    for mode, m in report["modes"].items():
        print(
            f"{mode:<14} {m['images_per_s']:7.0f} {m['steady_images_per_s']:7.0f} "
            f"{m['first_batch_s']:8.2f}s {m['peak_pss_mib']:6.0f} MiB "
            f"{m['peak_own_pss_mib']:5.0f} MiB {m['cpu_ms_per_image']:6.2f}ms"
        )
    print(f"equality: {report['equality']}")
    load = ", ".join(f"{x:.1f}" for x in report["load_average"])
    print(f"load average at the end: {load}")
    if "speed_vs_best_torch" in report:
        rounds = ", ".join(f"{r:.2f}" for r in report["speed_vs_best_torch_per_round"])
        print(
            f"edgeload speed vs best torch ({report['best_torch']}), by wall time: "
            f"{report['speed_vs_best_torch']:.2f}x of medians, "
            f"{report['speed_vs_best_torch_round_median']:.2f}x median per round "
            f"({rounds}) (target >= {SPEED_TARGET}x)"
        )
        print(
            f"edgeload speed by CPU ms/image: {report['cpu_speed_vs_best_torch']:.2f}x "
            f"{report['best_torch']}, {report['cpu_speed_vs_cheapest_torch']:.2f}x the "
            f"cheapest torch mode ({report['cheapest_torch']})"
        )
    if "pss_vs_torch_0" in report:
        print(
            f"edgeload peak PSS vs torch-0: {report['pss_vs_torch_0']:.2f}x "
            f"(target <= {PSS_TARGET}x); its anonymous + shared-memory part: "
            f"{report['own_pss_minus_torch_0_mib']:+.0f} MiB ({report['own_pss_vs_torch_0']:.2f}x)"
        )

    if "speed_vs_threads_2" in report:
        rounds = ", ".join(f"{r:.2f}" for r in report["speed_vs_threads_2_per_round"])
        line = (
            f"edgeload vs two bare threads (threads-2): {report['speed_vs_threads_2']:.2f}x "
            f"of medians ({rounds} per round), own PSS "
            f"{report['own_pss_minus_threads_2_mib']:+.0f} MiB"
        )
        if "threads_2_vs_best_torch" in report:
            line += f"; the bare threads themselves: {report['threads_2_vs_best_torch']:.2f}x "
            line += f"{report['best_torch']}"
        if "threads_2_own_pss_minus_torch_0_mib" in report:
            line += f", own PSS {report['threads_2_own_pss_minus_torch_0_mib']:+.0f} MiB "
            line += "over torch-0"
        print(line)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    parser.add_argument("--child", choices=MODES + EXTRA_MODES, help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child = _child(
            args.child, args.data, args.batch, args.out_size, args.step_ms, args.stall_ms
        )
        print(json.dumps(child))
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
