"""The plan: the concrete numbers for one loader on this device, each with its reason.

``plan_for`` takes a platform (from :func:`edgeload.platform.probe.probe`), its merged profile
and a workload (N video streams of a frame size, or dataset items of a size) and
decides worker kind and count, thread counts whose sum fits the usable cores, the
prefetch budget and slot count, the memory mode and the decode backend.  A plan is
printable, so ``edgeload probe`` can show a user why it chose what it chose.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ArgumentError, PlatformError
from ..vocabulary import GPU_MEMORY_MODES, DecodeBackend, MemoryMode, WorkerKind
from .profile import Profile, load_profile

# FFmpeg's H.264 decoder gains little beyond 4 threads at edge resolutions.
MAX_FFMPEG_THREADS = 4
# Files read for throughput: two frame threads let FFmpeg decode the next frame while
# the stream's thread resizes this one (4 x 720p on 2 cores: +8% over one thread, +3%
# over FFmpeg's own choice, measured with scripts/bench.py video). Live streams keep
# one: each extra frame thread holds back one more frame (33 ms at 30 fps).
FILE_FFMPEG_THREADS = 2
# A spawned/forkserver worker that imports torch costs about this much private memory.
PROCESS_WORKER_BYTES = 200 << 20


@dataclass(frozen=True)
class Threads:
    """Thread counts, chosen so decode, transforms and the model do not fight for cores."""

    cv2: int
    """``cv2.setNumThreads`` in each worker (resize, colour conversion)."""
    ffmpeg: int
    """FFmpeg decode threads per video stream."""
    torch: int
    """``torch.set_num_threads`` for the consumer (the model)."""
    per_worker_torch: int = 1
    """``torch.set_num_threads`` inside each worker."""


@dataclass(frozen=True)
class Plan:
    """The numbers for one loader instance; ``reasons`` says why, key by key."""

    workload: str
    worker_kind: WorkerKind
    num_workers: int
    memory_mode: MemoryMode
    prefetch_bytes: int
    """Budget for prefetched batches, bytes."""
    slot_bytes: int
    """Bytes of one batch slot (0 when the workload is unknown)."""
    slot_count: int
    """How many batch slots fit the budget (at least 2, so decode overlaps use)."""
    threads: Threads
    decode_backend: DecodeBackend
    usable_cores: int
    profile_source: str
    reasons: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The plan as plain, JSON-serialisable data."""
        out = dataclasses.asdict(self)
        out["reasons"] = dict(self.reasons)
        return out

    def describe(self) -> str:
        """A few readable lines: each choice and its reason."""
        t = self.threads
        rows = [
            ("workload", self.workload, ""),
            (
                "workers",
                f"{self.num_workers} x {self.worker_kind}",
                self.reasons.get("workers", ""),
            ),
            ("memory mode", self.memory_mode, self.reasons.get("memory_mode", "")),
            (
                "prefetch",
                f"{self.slot_count} slots of {format_mib(self.slot_bytes)}, "
                f"budget {format_mib(self.prefetch_bytes)}",
                self.reasons.get("prefetch", ""),
            ),
            (
                "threads",
                f"ffmpeg {t.ffmpeg}/stream, cv2 {t.cv2}, torch {t.torch} (+{t.per_worker_torch}/worker)",
                self.reasons.get("threads", ""),
            ),
            ("decode", self.decode_backend, self.reasons.get("decode", "")),
            ("profile", self.profile_source, ""),
        ]
        width = max(len(r[0]) for r in rows)
        return "\n".join(
            f"{name:<{width}}  {value}" + (f"  ({why})" if why else "") for name, value, why in rows
        )


def format_mib(n: int) -> str:
    """Bytes as ``"12.3 MiB"``, for reasons and messages."""
    return f"{n / (1 << 20):.1f} MiB"


def _usable_cores(platform: Any) -> int:
    cpu = getattr(platform, "cpu", None)
    for attr in ("usable_count", "online_count"):
        n = getattr(cpu, attr, None)
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


def _memory_mode(
    profile: Profile, platform: Any, explicit: bool, reasons: dict[str, str]
) -> MemoryMode:
    gpu = getattr(platform, "gpu", None)
    present = bool(getattr(gpu, "present", False))
    integrated = bool(getattr(gpu, "integrated", False))
    coherent = getattr(gpu, "io_coherent", None)
    # None: not checked (a fixture tree describes a board, not this process).
    usable = getattr(gpu, "cuda_usable", None)
    if not present:
        natural, why = "host", "no CUDA GPU on this device"
    elif integrated and coherent:
        natural, why = "mapped", "I/O-coherent Jetson: the GPU reads mapped host memory, no copy"
    elif integrated:
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


def plan_for(
    *,
    streams: int | None = None,
    frame: tuple[int, int] | None = None,
    item_bytes: int | None = None,
    batch: int | None = None,
    platform: Any = None,
    profile: Profile | None = None,
    gil_bound: bool | None = None,
    live: bool | None = None,
    prefetch_bytes: int | None = None,
    **overrides: Any,
) -> Plan:
    """Decide the numbers for one loader.

    Args:
        streams: number of video streams (a video workload), or None.
        frame: output frame size ``(width, height)`` for video, pixels.
        item_bytes: bytes of one dataset sample after its transforms (a dataset workload).
        batch: batch size; video defaults to one frame per stream.
        platform: the device; default :func:`edgeload.platform.probe.probe` of this machine.
        profile: the merged profile; default :func:`edgeload.platform.profile.load_profile`.
        gil_bound: True if the per-item Python work holds the GIL (then process workers
            pay off where memory allows); None means unknown (threads).
        live: for video, whether any stream is live (latency first); False means every
            stream is a file read for throughput; None means unknown (treated as live).
        prefetch_bytes: an explicit prefetch budget, bytes; overrides the profile's fraction.
        **overrides: profile keys (``worker_kind``, ``num_workers``, ``memory_mode``,
            ``decode_backend``, ``thread_budget``) that win over every profile.

    Raises:
        ProfileError: an override has a bad value.
        PlatformError: an explicit memory mode this device cannot give.
    """
    if platform is None:
        from .probe import probe

        platform = probe()
    explicit = {k for k, v in overrides.items() if v is not None and v != "auto"}
    if profile is None:
        profile = load_profile(platform, **overrides)
    elif overrides:
        profile = dataclasses.replace(
            profile, **{k: v for k, v in overrides.items() if v is not None}
        )
    if prefetch_bytes is not None and prefetch_bytes < 0:
        raise ArgumentError(f"prefetch_bytes must be >= 0, got {prefetch_bytes}")
    reasons: dict[str, str] = {}
    usable = _usable_cores(platform)
    budget = usable if profile.thread_budget == "auto" else int(profile.thread_budget)
    video = streams is not None and streams > 0

    # Slot size: one batch of output frames, or of dataset items.
    if video:
        assert streams is not None
        width, height = frame or (640, 640)
        batch = batch or streams
        slot_bytes = width * height * 3 * batch
        workload = f"video: {streams} stream(s) -> {batch} x {width}x{height}x3 uint8"
    elif item_bytes:
        batch = batch or 1
        slot_bytes = item_bytes * batch
        workload = f"dataset: batches of {batch} x {item_bytes} bytes"
    else:
        slot_bytes, workload = 0, "unspecified"

    # Workers.
    memory = getattr(platform, "memory", None)
    # Available RAM capped by the cgroup headroom; total RAM where availability is unknown.
    available = getattr(memory, "usable_bytes", None) or getattr(memory, "total_bytes", None)
    if video:
        kind: WorkerKind = "thread"
        count = streams or 1
        reasons["workers"] = "one decode thread per stream: OpenCV decode releases the GIL"
    else:
        count = _worker_count(profile.num_workers, budget)
        kind, reasons["workers"] = _worker_kind(
            profile, gil_bound, available, count, "worker_kind" in explicit
        )
    # Threads: decode first, then the consumer gets what is left.
    if video:
        assert streams is not None
        # Keep one core for the consumer (the model) when there are cores to spare.
        ffmpeg = max(1, min(MAX_FFMPEG_THREADS, (budget - 1) // streams))
        decode = min(budget, streams * ffmpeg)
        reasons["threads"] = (
            f"{streams} stream(s) share {budget} core(s): {ffmpeg} FFmpeg thread(s) each"
        )
        if live is False and ffmpeg < FILE_FFMPEG_THREADS:
            ffmpeg = FILE_FFMPEG_THREADS
            reasons["threads"] += (
                f", raised to {ffmpeg} for files: decode overlaps the resize, and files "
                "have no latency to lose"
            )
        elif streams >= budget:
            reasons["threads"] += "; one each, as every extra frame thread delays a live stream"
    else:
        ffmpeg, decode = 1, min(budget, count)
        reasons["threads"] = (
            f"{count} worker(s) x 1 thread each, so workers do not oversubscribe {budget} core(s)"
        )
    threads = Threads(cv2=1, ffmpeg=ffmpeg, torch=max(1, budget - decode), per_worker_torch=1)

    # Prefetch budget and slots.
    if prefetch_bytes is not None:
        budget_bytes = prefetch_bytes
        reasons["prefetch"] = "set by arguments"
    else:
        fraction_of = available or (1 << 30)
        raw = int(fraction_of * profile.prefetch_fraction)
        budget_bytes = min(max(raw, profile.prefetch_min_bytes), profile.prefetch_max_bytes)
        reasons["prefetch"] = (
            f"{profile.prefetch_fraction:.0%} of {format_mib(fraction_of)} available, "
            f"within [{format_mib(profile.prefetch_min_bytes)}, {format_mib(profile.prefetch_max_bytes)}]"
        )
    slot_count = max(2, min(budget_bytes // slot_bytes, 2 * count + 2)) if slot_bytes else 2
    if slot_bytes and slot_count * slot_bytes > budget_bytes:
        reasons["prefetch"] += f"; 2 slots is the minimum ({format_mib(2 * slot_bytes)})"

    shm = getattr(memory, "shm_bytes", None)
    need_shm = slot_count * slot_bytes
    if kind == "process" and "worker_kind" not in explicit and shm and shm < need_shm:
        kind = "thread"
        reasons["workers"] = (
            f"process slots need {format_mib(need_shm)} of /dev/shm, which has "
            f"{format_mib(shm)}: threads instead (docker: raise --shm-size)"
        )
    mode = _memory_mode(profile, platform, "memory_mode" in explicit, reasons)
    backend = _decode_backend(profile, platform, reasons)
    return Plan(
        workload=workload,
        worker_kind=kind,
        num_workers=count,
        memory_mode=mode,
        prefetch_bytes=budget_bytes,
        slot_bytes=slot_bytes,
        slot_count=slot_count,
        threads=threads,
        decode_backend=backend,
        usable_cores=usable,
        profile_source=profile.source,
        reasons=reasons,
    )


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


def _decode_backend(profile: Profile, platform: Any, reasons: dict[str, str]) -> DecodeBackend:
    opencv = getattr(platform, "opencv", None)
    want = profile.decode_backend
    if want == "auto":
        want = (
            "gstreamer"
            if getattr(platform, "family", "") in ("jetson", "raspberry_pi")
            else "ffmpeg"
        )
    if want == "ffmpeg":
        reasons["decode"] = "FFmpeg software decode"
        return "ffmpeg"
    if not getattr(platform, "live", True):
        reasons["decode"] = "the board's OpenCV (JetPack / distro) has GStreamer hardware decode"
        return "gstreamer"
    if opencv is None or not getattr(opencv, "gstreamer", False):
        have = "OpenCV is not importable" if opencv is None else "this OpenCV has no GStreamer"
        reasons["decode"] = f"GStreamer preferred for this board, but {have}: FFmpeg"
        return "ffmpeg"
    reasons["decode"] = "OpenCV has GStreamer: hardware decode elements where the board has them"
    return "gstreamer"
