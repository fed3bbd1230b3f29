"""The plan's decisions, one function each, over a typed :class:`Platform`.

:func:`edgeload.platform.plan.plan_for` calls them in data-path order (workload,
workers, threads, prefetch, /dev/shm fit, memory mode, decode backend); each returns
its value with the one-line reason the plan shows.
"""

from __future__ import annotations

import sys
from typing import NamedTuple

from ..errors import PlatformError
from ..vocabulary import GPU_MEMORY_MODES, DecodeBackend, MemoryMode, WorkerKind
from ._in_flight import slot_count, tasks_in_flight, video_batches_in_flight
from .facts import Platform
from .profile import Profile

# FFmpeg's H.264 decoder gains little beyond 4 threads at edge resolutions.
MAX_FFMPEG_THREADS = 4
# Files read for throughput: two frame threads let FFmpeg decode the next frame while
# the stream's thread resizes this one, so a core is not left idle behind one stream.
# Live streams keep one: each extra frame thread holds back one more frame (33 ms at
# 30 fps).
FILE_FFMPEG_THREADS = 2
# ... while there are at most this many file streams per core.  Beyond it the streams'
# own threads keep every core busy, and a second frame thread per stream costs CPU and
# memory for no speed: 4 x 720p on 2 cores with one thread ran 0.97x the frames/s of two
# (interval 0.93-1.04) at 0.93x the CPU per frame (0.89-0.97) and 24 MiB less PSS, over
# 20 rounds; 640x360 at 4-32 streams, ~1.5 MiB and three OS threads less per stream
# (docs/performance.md, "4 x 720p: one FFmpeg thread" and "Scale").
FILE_STREAMS_PER_CORE = 1
# ... or this many when every stream is a file read once to its end (no loop, no
# realtime pace): such a job lasts as long as its costliest file, and once the cheaper
# files end, a second frame thread lets the ones left use the cores they freed.  4 x
# 720p clips of unequal cost on 2 cores, read to the end: two threads ran 0.96x the
# ceiling's frames/s where one ran 0.90x, at 1.02x and 0.97x its CPU per frame (28
# rounds; docs/performance.md, "Files read to the end, and the other targets").  A looping file has
# no end, so there the rule above holds.
FINITE_FILE_STREAMS_PER_CORE = 2
# A spawned/forkserver worker that imports torch costs about this much private memory.
PROCESS_WORKER_BYTES = 200 << 20


def usable_cores(platform: Platform) -> int:
    for n in (platform.cpu.usable_count, platform.cpu.online_count):
        if isinstance(n, int) and n >= 1:
            return n
    return 1


def _worker_count(rule: int | str, usable: int) -> int:
    if isinstance(rule, int):
        return rule
    return {"cores": usable, "cores-1": max(1, usable - 1), "half-cores": max(1, usable // 2)}[rule]


def _free_threaded() -> bool:
    is_gil_enabled = getattr(sys, "_is_gil_enabled", None)
    return bool(is_gil_enabled is not None and not is_gil_enabled())


def format_mib(n: int) -> str:
    """Bytes as ``"12.3 MiB"``, for reasons and messages."""
    return f"{n / (1 << 20):.1f} MiB"


class Workload(NamedTuple):
    """What one loader moves: N video streams, dataset items of a size, or unknown."""

    streams: int
    """Video streams; 0 for a dataset or an unknown workload."""
    batch: int
    slot_bytes: int
    """Bytes of one batch slot; 0 when the item size is unknown."""
    description: str


def describe_workload(
    streams: int | None, frame: tuple[int, int] | None, item_bytes: int | None, batch: int | None
) -> Workload:
    if streams is not None and streams > 0:
        width, height = frame or (640, 640)
        batch = batch or streams
        return Workload(
            streams,
            batch,
            width * height * 3 * batch,
            f"video: {streams} stream(s) -> {batch} x {width}x{height}x3 uint8",
        )
    if item_bytes:
        batch = batch or 1
        return Workload(
            0, batch, item_bytes * batch, f"dataset: batches of {batch} x {item_bytes} bytes"
        )
    return Workload(0, batch or 1, 0, "unspecified")


def _available_bytes(platform: Platform) -> int | None:
    """Available RAM capped by the cgroup headroom; total RAM where availability is unknown."""
    return platform.memory.usable_bytes or platform.memory.total_bytes


def choose_workers(
    work: Workload,
    profile: Profile,
    platform: Platform,
    gil_bound: bool | None,
    budget: int,
    explicit: bool,
) -> tuple[WorkerKind, int, str]:
    if work.streams:
        return (
            "thread",
            work.streams,
            "one decode thread per stream: OpenCV decode releases the GIL",
        )
    count = _worker_count(profile.num_workers, budget)
    kind, why = _worker_kind(profile, gil_bound, _available_bytes(platform), count, explicit)
    return kind, count, why


def choose_threads(
    work: Workload, count: int, budget: int, live: bool | None, *, finite: bool = False
) -> tuple[int, int, str]:
    """FFmpeg threads per stream and torch threads for the consumer, and why.

    Decode first, then the consumer (the model) gets what is left.  ``finite``: every
    stream is a file read once to its end (see :data:`FINITE_FILE_STREAMS_PER_CORE`).
    """
    if not work.streams:
        decode = min(budget, count)
        why = f"{count} worker(s) x 1 thread each, so workers do not oversubscribe {budget} core(s)"
        return 1, max(1, budget - decode), why
    streams = work.streams
    # Keep one core for the consumer (the model) when there are cores to spare.
    ffmpeg = max(1, min(MAX_FFMPEG_THREADS, (budget - 1) // streams))
    decode = min(budget, streams * ffmpeg)
    why = f"{streams} stream(s) share {budget} core(s): {ffmpeg} FFmpeg thread(s) each"
    if live is False and ffmpeg < FILE_FFMPEG_THREADS:
        per_core = FINITE_FILE_STREAMS_PER_CORE if finite else FILE_STREAMS_PER_CORE
        if streams <= per_core * budget:
            ffmpeg = FILE_FFMPEG_THREADS
            why += (
                f", raised to {ffmpeg} for files: decode overlaps the resize, and files "
                "have no latency to lose (a file of at most 2 x 320x240 pixels a frame "
                "opens with 1: there a second thread adds CPU, not speed; each stream's "
                "stats() says which)"
            )
            if finite and streams > FILE_STREAMS_PER_CORE * budget:
                why += (
                    f"; up to {per_core} streams per core as every file is read to its "
                    "end: the files left once the cheaper ones end use the freed cores"
                )
        else:
            why += (
                f"; files too, as more than {per_core} stream(s) per core keep "
                "every core busy: a second frame thread would add CPU and memory, not speed"
            )
    elif streams >= budget:
        why += "; one each, as every extra frame thread delays a live stream"
    return ffmpeg, max(1, budget - decode), why


def choose_prefetch(
    work: Workload, count: int, profile: Profile, platform: Platform, prefetch_bytes: int | None
) -> tuple[int, int, str]:
    """The prefetch budget, the slot count it pays for, and why."""
    if prefetch_bytes is not None:
        budget_bytes, why = prefetch_bytes, "set by arguments"
    else:
        fraction_of = _available_bytes(platform) or (1 << 30)
        raw = int(fraction_of * profile.prefetch_fraction)
        budget_bytes = min(max(raw, profile.prefetch_min_bytes), profile.prefetch_max_bytes)
        why = (
            f"{profile.prefetch_fraction:.0%} of {format_mib(fraction_of)} available, "
            f"within [{format_mib(profile.prefetch_min_bytes)}, {format_mib(profile.prefetch_max_bytes)}]"
        )
    slot_bytes = work.slot_bytes
    # Video: two frames per stream; a dataset: the DataLoader's own rule.  An unknown
    # slot size gets the minimum.
    video = work.streams
    in_flight = (
        video_batches_in_flight(video, work.batch) if video else tasks_in_flight(count, None)
    )
    slots = slot_count(in_flight, slot_bytes, budget_bytes) if slot_bytes else 2
    if slot_bytes and slots * slot_bytes > budget_bytes:
        why += f"; 2 slots is the minimum ({format_mib(2 * slot_bytes)})"
    return budget_bytes, slots, why


def fit_shm(
    kind: WorkerKind, why: str, need_bytes: int, platform: Platform, explicit: bool
) -> tuple[WorkerKind, str]:
    """Process slots live in /dev/shm: a small one (docker's 64 MB) means threads."""
    shm = platform.memory.shm_bytes
    if kind == "process" and not explicit and shm and shm < need_bytes:
        return "thread", (
            f"process slots need {format_mib(need_bytes)} of /dev/shm, which has "
            f"{format_mib(shm)}: threads instead (docker: raise --shm-size)"
        )
    return kind, why


def choose_memory_mode(
    profile: Profile, platform: Platform, explicit: bool, reasons: dict[str, str]
) -> MemoryMode:
    gpu = platform.gpu
    # cuda_usable None: not checked (a fixture tree describes a board, not this process).
    present, usable = gpu.present, gpu.cuda_usable
    if not present:
        natural, why = "host", "no CUDA GPU on this device"
    elif gpu.integrated and gpu.io_coherent:
        natural, why = "mapped", "I/O-coherent Jetson: the GPU reads mapped host memory, no copy"
    elif gpu.integrated:
        natural, why = "managed", "Jetson without I/O coherency: pinned memory is CPU-uncached"
    else:
        natural, why = "pinned", "discrete GPU: page-locked slots with async copies"
    wanted = natural if profile.memory_mode == "auto" else profile.memory_mode
    if wanted != natural:
        why = f"set by {'arguments' if explicit else 'the profile'}"
    if wanted in GPU_MEMORY_MODES and (not present or usable is False):
        cause = "no CUDA GPU was found" if not present else "torch cannot use CUDA here"
        if explicit:
            raise PlatformError(
                f"memory_mode={wanted!r} needs a usable CUDA device, but {cause}; "
                "use memory_mode='host' (or 'auto')"
            )
        reasons["memory_mode"] = f"{wanted} wanted ({why}), but {cause}: falling back to host"
        return "host"
    reasons["memory_mode"] = why
    return wanted  # type: ignore[return-value]


def _worker_kind(
    profile: Profile, gil_bound: bool | None, available: int | None, count: int, explicit: bool
) -> tuple[WorkerKind, str]:
    if profile.worker_kind != "auto":
        return profile.worker_kind, f"set by {'arguments' if explicit else 'the profile'}"
    if _free_threaded():
        return "thread", "free-threaded Python: threads run in parallel"
    if not gil_bound:
        return "thread", "decode and array work release the GIL: threads share memory, no copies"
    need = count * PROCESS_WORKER_BYTES
    if available is not None and available < 2 * need:
        return (
            "thread",
            f"GIL-bound work, but {count} process(es) need ~{format_mib(need)}: too little RAM",
        )
    return "process", "GIL-bound Python work: processes run it in parallel"


def choose_decode_backend(
    profile: Profile, platform: Platform, reasons: dict[str, str]
) -> DecodeBackend:
    opencv = platform.opencv
    want = profile.decode_backend
    if want == "auto":
        want = "gstreamer" if platform.family in ("jetson", "raspberry_pi") else "ffmpeg"
    if want == "ffmpeg":
        reasons["decode"] = "FFmpeg software decode"
        return "ffmpeg"
    if not platform.live:
        reasons["decode"] = "the board's OpenCV (JetPack / distro) has GStreamer hardware decode"
        return "gstreamer"
    if opencv is None or not opencv.gstreamer:
        have = "OpenCV is not importable" if opencv is None else "this OpenCV has no GStreamer"
        reasons["decode"] = f"GStreamer preferred for this board, but {have}: FFmpeg"
        return "ffmpeg"
    reasons["decode"] = "OpenCV has GStreamer: hardware decode elements where the board has them"
    return "gstreamer"
