"""Host -> GPU batch transfer: pageable, stock pin_memory, edgeload pinned, mapped, managed.

Each method runs the same loop: the "decoder" (a CPU copy) writes batch k into a slot,
the batch goes to the GPU the method's way, and a "model" (a fixed GPU spin plus a
reduction that reads every byte) consumes it. Reported per method: median and mean
per-batch wall time, full-batch copies and bytes copied per batch, host PSS added,
and the ratio to the pageable ``.cuda()`` baseline. A checksum computed on the GPU
must equal the CPU's for every batch, so a method that loses writes fails loudly.

Run: ``python benchmarks/bench_transfer.py [--batches 40] [--out results.json]``
(or ``python scripts/bench.py transfer``). Needs CUDA; exits 2 saying why without it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from edgeload.cuda._lease import wait_gpu_idle
from edgeload.cuda.memory import allocate_gpu_array, as_cuda_tensor
from edgeload.cuda.status import check_memory_mode, cuda_device, cuda_status
from edgeload.cuda.transfer import DeviceCopier

METHODS = ("pageable", "stock_pin_memory", "pinned", "mapped", "managed")
_WAIT_S = 30.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The benchmark's options (shared with ``scripts/bench.py transfer``)."""
    parser.add_argument("--batches", type=int, default=40, help="timed batches per method")
    parser.add_argument("--warmup", type=int, default=5, help="untimed batches first")
    parser.add_argument("--batch", type=int, default=8, help="frames per batch")
    parser.add_argument("--size", type=int, nargs=2, default=(640, 640), metavar=("H", "W"))
    parser.add_argument("--model-ms", type=float, default=2.0, help="GPU work per batch")
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    parser.add_argument("--out", help="write the results as JSON here")


def _spin_cycles_per_ms(torch: Any) -> float:
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1_000_000)  # wake the clocks up first
    start.record()
    torch.cuda._sleep(20_000_000)
    stop.record()
    stop.synchronize()
    return 20_000_000 / max(start.elapsed_time(stop), 1e-3)


def _pss_bytes() -> int:
    try:
        import psutil
    except ImportError:  # a bare GPU box: the kernel's own summary says the same
        with open("/proc/self/smaps_rollup") as fh:
            kb = next(int(line.split()[1]) for line in fh if line.startswith("Pss:"))
        return kb * 1024
    try:
        return int(psutil.Process().memory_full_info().pss)
    except (AttributeError, psutil.Error):
        return int(psutil.Process().memory_info().rss)


def _frames(args: argparse.Namespace) -> list[np.ndarray]:
    shape = (args.batch, *args.size, 3)
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, shape, dtype=np.uint8) for _ in range(4)]


def _slots(mode: str, shape: tuple[int, ...], count: int = 2) -> list[np.ndarray]:
    nbytes = int(np.prod(shape))
    if mode == "host":
        return [np.empty(shape, np.uint8) for _ in range(count)]
    return [allocate_gpu_array(mode, nbytes).reshape(shape) for _ in range(count)]  # type: ignore[arg-type]


def _deliveries(method: str, args: argparse.Namespace, torch: Any) -> Iterator[tuple[Any, int]]:
    """Yield (cuda tensor, full-batch copies made) per batch, after writing the next frames."""
    frames = _frames(args)
    shape = frames[0].shape
    mode = {"pageable": "host", "stock_pin_memory": "host"}.get(method, method)
    slots = _slots(mode, shape)
    copier = DeviceCopier() if method == "pinned" else None
    k = 0
    while True:
        slot = slots[k % len(slots)]
        if not wait_gpu_idle(slot, timeout_s=_WAIT_S):  # the lease rule: never overwrite
            raise TimeoutError(f"{method}: slot still busy on the GPU after {_WAIT_S} s")
        np.copyto(slot, frames[k % len(frames)])  # the decoder writing in place
        if method == "pageable":
            yield torch.from_numpy(slot).cuda(), 1
        elif method == "stock_pin_memory":
            # What DataLoader(pin_memory=True) + .cuda(non_blocking=True) does.
            yield torch.from_numpy(slot).pin_memory().cuda(non_blocking=True), 2
        elif copier is not None:
            yield copier.copy(slot).tensor(), 1
        else:
            yield as_cuda_tensor(slot), 0
        k += 1


def run_method(method: str, args: argparse.Namespace, torch: Any, cycles_per_ms: float) -> dict:
    """Time one method; raise AssertionError if the GPU saw different bytes than written."""
    batch_nbytes = args.batch * args.size[0] * args.size[1] * 3
    expected = [int(f.sum(dtype=np.int64)) for f in _frames(args)]
    pss_before = _pss_bytes()
    deliveries = _deliveries(method, args, torch)
    sums: list[Any] = []
    times: list[float] = []
    copies = 0
    spin = int(args.model_ms * cycles_per_ms)
    total = args.warmup + args.batches
    torch.cuda.synchronize()
    start = last = time.perf_counter()
    for k in range(total):
        tensor, made = next(deliveries)
        torch.cuda._sleep(spin)  # the model's compute
        sums.append(tensor.sum(dtype=torch.int64))  # ... reading every byte
        del tensor
        copies += made
        now = time.perf_counter()
        if k == args.warmup - 1:
            torch.cuda.synchronize()
            start = now = time.perf_counter()
        elif k >= args.warmup:
            times.append(now - last)
        last = now
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    pss_added = _pss_bytes() - pss_before
    deliveries.close()
    got = [int(s) for s in sums]
    want = [expected[k % len(expected)] for k in range(total)]
    if got != want:
        bad = next(k for k in range(total) if got[k] != want[k])
        raise AssertionError(f"{method}: batch {bad} checksum {got[bad]} != written {want[bad]}")
    return {
        "method": method,
        "per_batch_ms_median": 1000 * statistics.median(times),
        "per_batch_ms_mean": 1000 * elapsed / args.batches,
        "copies_per_batch": copies / total,
        "bytes_copied_per_batch": int(batch_nbytes * copies / total),
        "host_pss_added_mb": pss_added / 2**20,
    }


def run(args: argparse.Namespace) -> int:
    """Run the benchmark; print a table; write JSON to ``--out`` (default $OUT/transfer.json)."""
    status = cuda_status()
    if not status.usable:
        print(f"bench transfer: needs CUDA: {status.reason}", file=sys.stderr)
        return 2
    import torch

    device = cuda_device()
    cycles = _spin_cycles_per_ms(torch)
    results, skipped = [], {}
    for method in args.methods:
        if method in ("mapped", "managed", "pinned"):
            try:
                check_memory_mode(method)
            except Exception as exc:
                skipped[method] = str(exc)
                continue
        results.append(run_method(method, args, torch, cycles))
    base = next((r for r in results if r["method"] == "pageable"), results[0])
    for r in results:
        r["ratio_to_pageable"] = r["per_batch_ms_mean"] / base["per_batch_ms_mean"]
    report = {
        "workload": {
            "batch_shape": [args.batch, *args.size, 3],
            "batch_mb": args.batch * args.size[0] * args.size[1] * 3 / 2**20,
            "batches": args.batches,
            "model_ms": args.model_ms,
        },
        "device": device.to_dict(),
        "torch": torch.__version__,
        "results": results,
        "skipped": skipped,
    }
    _print(report)
    out = args.out or (
        os.path.join(os.environ["OUT"], "transfer.json") if "OUT" in os.environ else None
    )
    if out:
        with open(out, "w") as fh:
            json.dump(report, fh, indent=2)
        print(f"wrote {out}")
    return 0


def _print(report: dict) -> None:
    w = report["workload"]
    print(f"device: {report['device']['name']}  torch {report['torch']}")
    print(f"workload: {w['batches']} batches of {w['batch_shape']} uint8 ({w['batch_mb']:.1f} MiB)")
    print(f"model: {w['model_ms']} ms GPU spin + a full read per batch")
    header = f"{'method':18} {'median ms':>10} {'mean ms':>9} {'copies':>7} {'MiB copied':>11}"
    print(header + f" {'PSS+ MiB':>9} {'x pageable':>10}")
    for r in report["results"]:
        print(
            f"{r['method']:18} {r['per_batch_ms_median']:10.2f} {r['per_batch_ms_mean']:9.2f} "
            f"{r['copies_per_batch']:7.1f} {r['bytes_copied_per_batch'] / 2**20:11.1f} "
            f"{r['host_pss_added_mb']:9.1f} {r['ratio_to_pageable']:10.2f}"
        )
    for method, why in report["skipped"].items():
        print(f"{method:18} skipped: {why}")


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
