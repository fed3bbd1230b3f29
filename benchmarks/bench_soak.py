"""Soak: both loaders for minutes on end, with cameras that go down; nothing may grow.

Workload: a StreamLoader over two cameras (real RTSP servers on loopback, each serving a
looping clip): camera 0 is stopped and restarted every ``--cut-every-s``, and once, a
quarter into the run, both are down for ``--both-down-s``; consumed by one thread with a
plain ``for batch in loader:``.  And a DataLoader with 2 process workers (fresh each
epoch, so worker start, shared slots and exit are exercised on every epoch) in the main
thread, epoch after epoch.  The camera loop must never raise, and batches must keep
coming at the deadline while both cameras are down (the longest gap between two batches
is printed and must stay under ``MAX_BATCH_GAP_S``).

After every epoch it reads this process's PSS, split into its anonymous part (heap,
malloc arenas, thread stacks: memory only this process can grow) and its file-backed
part (the pages of libtorch, cv2, FFmpeg and Python's own libraries), its open file
descriptors, its threads and the bytes of its ``/dev/shm/edgeload-<pid>-*`` segments,
and prints a reading every ``--interval-s``. At the end it fits a line over the second
half of the readings (one per epoch: PSS moves by +-10 MiB with the epoch's phase, so a
few readings a minute cannot resolve 1 MiB/min) (the first half includes warm-up:
allocator arenas, decoder buffers, code pages run for the first time) and fails if the
anonymous PSS grows by 1 MiB/min or more, or open files, threads or shared bytes grow
at all (slope of 0.5 per minute or more for counts; any growth for shared bytes).

Why anonymous PSS decides: a shared library's pages count in PSS divided by the number
of processes mapping them, so the file-backed part rises and falls as other processes
that load torch or cv2 (this run's own DataLoader workers, anything else on the box)
come and go; on the shared development box it moved 10 MiB in minutes while the heap
moved 0.1 MiB. Total PSS and its file-backed part are printed beside it.
"""

from __future__ import annotations

import argparse
import gc
import os
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SERVER = ROOT / "tests" / "rtsp_server.py"
SYSTEM_PYTHON = "/usr/bin/python3"
PSS_SLOPE_MIB_PER_MIN = 1.0
COUNT_SLOPE_PER_MIN = 0.5
# With every camera down the loader ships an empty batch each deadline (0.1 s for live
# sources); a gap this long means the loop stalled.
MAX_BATCH_GAP_S = 5.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--minutes", type=float, default=10.0, help="how long to run")
    parser.add_argument("--interval-s", type=float, default=30.0, help="seconds between samples")
    parser.add_argument("--cut-every-s", type=float, default=30.0, help="RTSP drop period")
    parser.add_argument("--down-s", type=float, default=5.0, help="how long each drop lasts")
    parser.add_argument("--both-down-s", type=float, default=60.0,
                        help="once, a quarter in, both cameras are down this long")  # fmt: skip


def _clip(directory: Path) -> Path:
    path = directory / "soak.mp4"
    subprocess.run(
        ["ffmpeg", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
         "testsrc2=size=320x240:rate=30", "-t", "10", "-c:v", "libx264", "-preset",
         "ultrafast", "-pix_fmt", "yuv420p", "-g", "30", str(path)],
        check=True, timeout=120,
    )  # fmt: skip
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Camera:
    """``tests/rtsp_server.py`` in a subprocess that this run stops and restarts."""

    def __init__(self, clip: Path, port: int) -> None:
        self.clip, self.port = clip, port
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> str:
        self.proc = subprocess.Popen(
            [SYSTEM_PYTHON, str(SERVER), "--port", str(self.port), "--file", str(self.clip)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line.startswith("READY"):
            self.stop()
            raise SystemExit(f"bench soak: the RTSP server did not start: {line!r}")
        return line.split()[1]

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
            if self.proc.stdout:
                self.proc.stdout.close()
        self.proc = None


def _shm_bytes() -> int:
    prefix = f"edgeload-{os.getpid()}-"
    total = 0
    for name in os.listdir("/dev/shm"):
        if name.startswith(prefix):
            try:
                total += os.stat(os.path.join("/dev/shm", name)).st_blocks * 512
            except FileNotFoundError:
                continue
    return total


def _rollup() -> dict[str, float]:
    """``Pss_Anon``, ``Pss_File`` and ``Pss_Shmem`` of this process in MiB (Linux 5.x
    smaps_rollup).

    Without those lines (older kernels) the anonymous part is the whole PSS.
    """
    from edgeload.measure import smaps_pss

    wanted = ("Pss_Anon", "Pss_File", "Pss_Shmem")
    return {key: n / 2**20 for key, n in smaps_pss().items() if key in wanted}


def sample() -> dict[str, float]:
    """One reading: this process's PSS (MiB; anonymous and file-backed), open fds, OS
    threads, /dev/shm bytes.

    PSS is this process's own: the tree would also hold the RTSP server this run
    restarts every cut and the DataLoader workers of whichever epoch is running, whose
    coming and going is noise of tens of MiB, not growth (workers start fresh each
    epoch, so they cannot accumulate anything).
    """
    import psutil

    pss = psutil.Process().memory_full_info().pss / 2**20
    rollup = _rollup()
    return {
        "pss_mib": pss,
        "pss_anon_mib": rollup.get("Pss_Anon", pss) + rollup.get("Pss_Shmem", 0.0),
        "pss_file_mib": rollup.get("Pss_File", 0.0),
        "fds": float(len(os.listdir("/proc/self/fd"))),
        "threads": float(len(os.listdir("/proc/self/task"))),
        "shm_bytes": float(_shm_bytes()),
    }


def slope_per_min(times_s: list[float], values: list[float]) -> float:
    """Least-squares slope of ``values`` over ``times_s``, per minute."""
    n = len(times_s)
    if n < 2:
        return 0.0
    mt, mv = sum(times_s) / n, sum(values) / n
    var = sum((t - mt) ** 2 for t in times_s)
    if var == 0:
        return 0.0
    return 60.0 * sum((t - mt) * (v - mv) for t, v in zip(times_s, values)) / var


def verdict(rows: list[tuple[float, dict[str, float]]]) -> tuple[dict[str, float], list[str]]:
    """Slopes over the second half of ``rows`` and what grew without bound."""
    half = rows[len(rows) // 2 :]
    times = [t for t, _ in half]
    slopes = {k: slope_per_min(times, [r[k] for _, r in half]) for k in half[0][1]}
    limits = {
        "pss_anon_mib": PSS_SLOPE_MIB_PER_MIN,
        "fds": COUNT_SLOPE_PER_MIN,
        "threads": COUNT_SLOPE_PER_MIN,
        "shm_bytes": 1.0,
    }
    grew = [
        f"{k} grows {slopes[k]:.2f}/min (limit {limits[k]})"
        for k in limits
        if slopes[k] >= limits[k]
    ]
    return slopes, grew


class Frames:
    """A map-style dataset of synthetic 64x64 frames (module level: workers unpickle it)."""

    def __len__(self) -> int:
        return 512

    def __getitem__(self, i: int) -> Any:
        import numpy as np

        return np.full((64, 64, 3), i % 251, np.uint8)


def run(args: argparse.Namespace) -> int:
    # Each camera cut makes OpenCV and FFmpeg log every failed reconnect: keep it quiet.
    os.environ.setdefault("OPENCV_LOG_LEVEL", "ERROR")
    os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", "-8")
    import edgeload
    from edgeload.video import StreamLoader, VideoSource

    stop = threading.Event()
    counts: dict[str, Any] = {"batches": 0, "epochs": 0, "cuts": 0, "empty": 0}
    errors: list[BaseException] = []
    gaps = {"max_s": 0.0, "in_outage_s": 0.0}
    outage = threading.Event()  # set while both cameras are down
    camera_lock = threading.Lock()  # one thread starts and stops the cameras at a time
    with tempfile.TemporaryDirectory(prefix="edgeload-soak-") as tmp:
        clip = _clip(Path(tmp))
        cameras = [Camera(clip, _free_port()), Camera(clip, _free_port())]
        sources = [
            VideoSource(camera.start(), read_timeout_s=2, open_timeout_s=3, backoff_s=(0.2, 1.0))
            for camera in cameras
        ]
        # Started here, not by the consumer thread: stats and close() see running streams.
        streams = StreamLoader(sources, size=(160, 120)).start()

        def consume() -> None:
            last = time.monotonic()
            try:
                for batch in streams:  # the deployed loop: no try/except around next()
                    now = time.monotonic()
                    gaps["max_s"] = max(gaps["max_s"], now - last)
                    if outage.is_set():
                        gaps["in_outage_s"] = max(gaps["in_outage_s"], now - last)
                    last = now
                    counts["batches"] += 1
                    counts["empty"] += not bool(batch.valid.any())
                    if stop.is_set():
                        return
            except BaseException as exc:  # the verdict reports it
                errors.append(exc)

        def cut() -> None:
            while not stop.wait(args.cut_every_s):
                with camera_lock:
                    cameras[0].stop()
                counts["cuts"] += 1
                if stop.wait(args.down_s):
                    return
                with camera_lock:
                    if not outage.is_set() and cameras[0].proc is None:
                        cameras[0].start()

        def both_down() -> None:
            # A quarter in: the second half, which the verdict fits, is the steady state
            # after the cameras came back, not the reconnects themselves.
            if stop.wait(args.minutes * 60 / 4):
                return
            with camera_lock:
                for camera in cameras:
                    camera.stop()
                outage.set()
            stop.wait(args.both_down_s)
            with camera_lock:
                outage.clear()
                if not stop.is_set():
                    for camera in cameras:
                        if camera.proc is None:
                            camera.start()

        threads = [
            threading.Thread(target=consume, name="soak-consumer", daemon=True),
            threading.Thread(target=cut, name="soak-cutter", daemon=True),
            threading.Thread(target=both_down, name="soak-outage", daemon=True),
        ]
        for thread in threads:
            thread.start()
        loader = edgeload.DataLoader(
            Frames(), batch_size=16, num_workers=2, worker_kind="process", shuffle=True
        )
        began = time.monotonic()
        end = began + args.minutes * 60
        next_sample = began
        rows: list[tuple[float, dict[str, float]]] = []
        print(f"{'t s':>6} {'PSS MiB':>8} {'anon':>6} {'file':>6} {'fds':>5} {'threads':>7} "
              f"{'shm KiB':>8} {'epochs':>6} {'batches':>7} {'cuts':>4} {'reconnects':>10}",
              flush=True)  # fmt: skip
        try:
            while True:
                now = time.monotonic()
                gc.collect()  # unreachable garbage is not growth; what stays reachable is
                row = sample()
                rows.append((now - began, row))  # one reading per epoch for the fit
                if now >= next_sample:
                    print(
                        f"{now - began:>6.0f} {row['pss_mib']:>8.1f} {row['pss_anon_mib']:>6.1f} "
                        f"{row['pss_file_mib']:>6.1f} {row['fds']:>5.0f} "
                        f"{row['threads']:>7.0f} {row['shm_bytes'] / 1024:>8.0f} "
                        f"{counts['epochs']:>6} {counts['batches']:>7} "
                        f"{counts['cuts']:>4} "
                        f"{streams.stats()['streams'][0].get('reconnects', 0):>10}",
                        flush=True,
                    )
                    next_sample += args.interval_s
                if now >= end:
                    break
                for _ in loader:
                    pass
                counts["epochs"] += 1
        finally:
            stop.set()
            loader.close()
            streams.close()
            for thread in threads:
                thread.join(15)
            for camera in cameras:
                camera.stop()
    if len(rows) < 4:
        print("bench soak: too few samples for a verdict; run longer (--minutes)")
        return 2
    slopes, grew = verdict(rows)
    print(
        "second-half slopes per minute: "
        + ", ".join(f"{k} {v:+.3f}" for k, v in slopes.items())
        + f" ({len(rows) - len(rows) // 2} samples; {counts['epochs']} epochs, "
        f"{counts['batches']} stream batches, {counts['cuts']} camera cuts, "
        f"{args.minutes:g} min)"
    )
    print(
        "PSS is anonymous (heap, arenas, stacks: the verdict) plus file-backed (shared "
        "library pages, whose PSS share moves as other processes that map them come and go)"
    )
    print(
        f"camera loop: {counts['empty']} empty batches; longest gap between batches "
        f"{gaps['max_s']:.2f} s, {gaps['in_outage_s']:.2f} s while both cameras were down "
        f"({args.both_down_s:g} s)"
    )
    if errors:
        grew.append(f"the camera loop raised {type(errors[0]).__name__}: {errors[0]}")
    if gaps["max_s"] > MAX_BATCH_GAP_S:
        grew.append(f"the camera loop waited {gaps['max_s']:.1f} s for a batch")
    if grew:
        print("FAIL: " + "; ".join(grew))
        return 1
    print("PASS: nothing grows without bound")
    return 0
