"""The plan: the concrete numbers for one loader on this device, each with its reason.

``plan_for`` takes a platform (from :func:`edgeload.platform.probe.probe`), its merged profile
and a workload (N video streams of a frame size, or dataset items of a size) and
decides worker kind and count, thread counts whose sum fits the usable cores, the
prefetch budget and slot count, the memory mode and the decode backend.  A plan is
printable, so ``edgeload probe`` can show a user why it chose what it chose.

The decisions are one function each over a typed :class:`Platform`; ``plan_for`` calls
them in data-path order (workload, workers, threads, prefetch, /dev/shm fit, memory
mode, decode backend), and each returns its value with the one-line reason the plan
shows.

Both loaders size their slot pools by the rules at the end (how many items a loader
keeps in flight, and how many slots pay for them): the DataLoader by its tasks in
flight, the StreamLoader by the frames its streams keep in flight.  The plan
(:func:`choose_prefetch`) uses them for a workload whose slot size it knows; the
DataLoader once its first batch has shown the size.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from .. import _args
from ..errors import ArgumentError, PlatformError
from ..vocabulary import GPU_MEMORY_MODES, DecodeBackend, MemoryMode, WorkerKind
from .facts import OpenCVInfo, Platform
from .profile import Profile, check_overrides, load_profile

__all__ = [
    "DECODE_BUDGETS",
    "PROCESS_WORKER_BYTES",
    "Plan",
    "Threads",
    "decode_budget",
    "format_mib",
    "gstreamer_opencv_fix",
    "plan_for",
    "slot_count",
    "tasks_in_flight",
]


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
    notes: tuple[str, ...] = ()
    """What the user must know before trusting the plan (an unsupported JetPack)."""
    output_bytes: int = 0
    """Bytes of one model-ready (float) batch, made beside its uint8 slot; 0: the slot
    is the batch (a StreamLoader's ``dtype``)."""

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
            *(
                [("output", format_mib(self.output_bytes), self.reasons.get("output", ""))]
                if self.output_bytes
                else []
            ),
            ("profile", self.profile_source, ""),
        ]
        rows += [("note", note, "") for note in self.notes]
        width = max(len(r[0]) for r in rows)
        return "\n".join(
            f"{name:<{width}}  {value}" + (f"  ({why})" if why else "") for name, value, why in rows
        )


def _check_plan_arguments(
    streams: Any, frame: Any, item_bytes: Any, batch: Any, gil_bound: Any, live: Any,
    finite: Any, prefetch_bytes: Any, profile: Any,
) -> None:  # fmt: skip
    owner = "plan_for"
    _args.integer(owner, "streams", streams, low=1, none_ok=True)
    if frame is not None:
        _args.pair_of_ints(owner, "frame", frame, what="(width, height)")
    _args.integer(owner, "item_bytes", item_bytes, low=0, none_ok=True)
    _args.integer(owner, "batch", batch, low=1, none_ok=True)
    for name, value in (("gil_bound", gil_bound), ("live", live)):
        if value is not None:
            _args.flag(owner, name, value)
    _args.flag(owner, "finite", finite)
    _args.integer(owner, "prefetch_bytes", prefetch_bytes, low=0, none_ok=True)
    if profile is not None and not isinstance(profile, Profile):
        raise ArgumentError(
            f"plan_for: profile must be a Profile or None, got {type(profile).__name__}; "
            "load one with edgeload.platform.profile.load_profile()"
        )


def plan_for(
    *,
    streams: int | None = None,
    frame: tuple[int, int] | None = None,
    item_bytes: int | None = None,
    batch: int | None = None,
    platform: Platform | None = None,
    profile: Profile | None = None,
    gil_bound: bool | None = None,
    live: bool | None = None,
    finite: bool = False,
    prefetch_bytes: int | None = None,
    source_size: tuple[int, int] | None = None,
    source_fps: float | None = None,
    **overrides: Any,
) -> Plan:
    """Decide the numbers for one loader.

    Args:
        streams: number of video streams (a video workload), or None.
        frame: output frame size ``(width, height)`` for video, pixels.
        item_bytes: bytes of one dataset sample after its transforms (a dataset workload).
        batch: batch size; video defaults to one frame per stream.
        platform: the device; default :func:`edgeload.platform.probe.probe` of this machine.
        profile: the merged profile; default :func:`edgeload.platform.profile.load_profile`
            for a video loader (``streams``) or a dataset one (its ``[video]`` or
            ``[dataset]`` table).
        gil_bound: True if the per-item Python work holds the GIL (then process workers
            pay off where memory allows); None means unknown (threads).
        live: for video, whether any stream is live (latency first); False means every
            stream is a file read for throughput; None means unknown (treated as live).
        finite: for video files (``live=False``), every one is read once to its end
            (no loop, no realtime pace), so the job lasts as long as its costliest file.
        prefetch_bytes: an explicit prefetch budget, bytes; overrides the profile's fraction.
        source_size: the streams' own size ``(width, height)`` as decoded, for the
            board's decode budget; default ``frame``.
        source_fps: the streams' own frame rate, for the decode budget; default 30.
        **overrides: profile keys (``worker_kind``, ``num_workers``, ``memory_mode``,
            ``decode_backend``, ``thread_budget``) that win over every profile.

    Raises:
        ArgumentError: an argument of the wrong type or out of range (``prefetch_bytes``
            negative, ``frame`` not a pair of ints), or an override with a bad key or
            value (the named settings are accepted in any case).
        ProfileError: a profile file holds a bad value.
        PlatformError: an explicit memory mode this device cannot give.
    """
    _check_plan_arguments(streams, frame, item_bytes, batch, gil_bound, live, finite,
                          prefetch_bytes, profile)  # fmt: skip
    if source_size is not None:
        _args.pair_of_ints("plan_for", "source_size", source_size, what="(width, height)")
    _args.number("plan_for", "source_fps", source_fps, above=0, none_ok=True)
    overrides = check_overrides(overrides)
    if platform is None:
        from .probe import probe

        platform = probe()
    explicit = {k for k, v in overrides.items() if v != "auto"}
    if profile is None:
        # The profile file's [video] or [dataset] table: the kind of loader planning.
        asking: Literal["dataset", "video"] = "video" if streams else "dataset"
        profile = load_profile(platform, workload=asking, **overrides)
    elif overrides:
        profile = dataclasses.replace(profile, **overrides)
    reasons: dict[str, str] = {}
    usable = usable_cores(platform)
    budget = usable if profile.thread_budget == "auto" else int(profile.thread_budget)
    work = describe_workload(streams, frame, item_bytes, batch)
    kind, count, why_workers = choose_workers(
        work, profile, platform, gil_bound, budget, "worker_kind" in explicit
    )
    ffmpeg, torch_threads, reasons["threads"] = choose_threads(
        work, count, budget, live, finite=finite
    )
    threads = Threads(cv2=1, ffmpeg=ffmpeg, torch=torch_threads)
    budget_bytes, slot_count, reasons["prefetch"] = choose_prefetch(
        work, count, profile, platform, prefetch_bytes
    )
    kind, reasons["workers"] = fit_shm(
        kind, why_workers, slot_count * work.slot_bytes, platform, "worker_kind" in explicit
    )
    mode = choose_memory_mode(profile, platform, "memory_mode" in explicit, reasons)
    backend = choose_decode_backend(profile, platform, reasons)
    return Plan(
        workload=work.description,
        worker_kind=kind,
        num_workers=count,
        memory_mode=mode,
        prefetch_bytes=budget_bytes,
        slot_bytes=work.slot_bytes,
        slot_count=slot_count,
        threads=threads,
        decode_backend=backend,
        usable_cores=usable,
        profile_source=profile.source,
        reasons=reasons,
        notes=tuple(
            note
            for note in (
                platform.unsupported,
                decode_budget_note(
                    platform, work.streams, source_size or frame or (640, 640), source_fps
                ),
            )
            if note
        ),
    )


class DecodeBudget(NamedTuple):
    """How many 1080p30 H.265 streams a board's hardware decoder keeps up with."""

    model_contains: str
    """Matched, case-insensitive, against :attr:`Platform.model`; first match wins."""
    streams_1080p30: float
    source: str


# From the vendors' module data sheets (H.265; H.264 is the same or lower on every
# board listed).  A rate is counted in pixels per second, the unit these decoders
# are specified in: one 4K60 stream is eight 1080p30 ones.  Order matters: the more
# specific name first.  Sources: NVIDIA Jetson module data sheets and the Jetson
# module comparison (developer.nvidia.com/embedded/jetson-modules), "Video decode"
# rows; Raspberry Pi 4/5 product briefs (raspberrypi.com), "H.265 (HEVC) 4Kp60 decode".
DECODE_BUDGETS: tuple[DecodeBudget, ...] = (
    DecodeBudget("AGX Orin 32GB", 18, "Jetson AGX Orin 32GB data sheet: 18x 1080p30 H.265"),
    # The devkit module (p3701-0000) is specified as the 64GB module.
    DecodeBudget("AGX Orin", 22, "Jetson AGX Orin 64GB data sheet: 22x 1080p30 H.265"),
    DecodeBudget("Orin NX", 18, "Jetson Orin NX data sheet: 18x 1080p30 H.265"),
    DecodeBudget("Orin Nano", 11, "Jetson Orin Nano data sheet: 11x 1080p30 H.265"),
    DecodeBudget("AGX Xavier", 52, "Jetson AGX Xavier data sheet: 52x 1080p30 H.265"),
    DecodeBudget("Xavier NX", 32, "Jetson Xavier NX data sheet: 32x 1080p30 H.265"),
    DecodeBudget("Jetson TX2", 14, "Jetson TX2 data sheet: 14x 1080p30 H.265"),
    DecodeBudget("Jetson Nano", 8, "Jetson Nano data sheet: 8x 1080p30 H.265"),
    DecodeBudget("Raspberry Pi 5", 8, "Raspberry Pi 5 product brief: 4Kp60 HEVC"),
    DecodeBudget("Raspberry Pi 4", 8, "Raspberry Pi 4 product brief: 4Kp60 HEVC"),
)
_REFERENCE_PIXELS_PER_SECOND = 1920 * 1080 * 30


def decode_budget(platform: Platform) -> DecodeBudget | None:
    """The board's hardware decode budget, or None where it is not known."""
    model = str(platform.model or "").lower()
    for budget in DECODE_BUDGETS:
        if budget.model_contains.lower() in model:
            return budget
    return None


def decode_budget_note(
    platform: Platform, streams: int, size: tuple[int, int], fps: float | None
) -> str | None:
    """A note when ``streams`` of ``size`` at ``fps`` (default 30) exceed the board's
    hardware decode budget; None within it, or where the budget is unknown."""
    budget = decode_budget(platform)
    if budget is None or not streams:
        return None
    rate = 30.0 if fps is None else float(fps)
    each = size[0] * size[1] * rate / _REFERENCE_PIXELS_PER_SECOND
    load = streams * each
    if load <= budget.streams_1080p30:
        return None
    return (
        f"decode budget exceeded: {streams} stream(s) of {size[0]}x{size[1]} at {rate:g} fps "
        f"are {load:.1f} 1080p30-equivalents, {platform.model} decodes about "
        f"{budget.streams_1080p30:g} ({budget.source}), {load - budget.streams_1080p30:.1f} "
        "over: frames will arrive late or be dropped. What helps: the cameras' substreams "
        "at a lower resolution (640x360 is 1/9 of 1080p), key-frames only (nvv4l2decoder "
        "skip-frames=2), or a lower frame rate set on the camera (edgeload's fps= drops "
        "frames after decode)"
    )


# FFmpeg's H.264 decoder gains little beyond 4 threads at edge resolutions.
MAX_FFMPEG_THREADS = 4
# Files read for throughput: two frame threads let FFmpeg decode the next frame while
# the stream's thread resizes this one, so a core is not left idle behind one stream.
# Live streams keep one: each extra frame thread holds back one more frame (33 ms at
# 30 fps).
FILE_FFMPEG_THREADS = 2
# ... while there are at most this many file streams per core.  Beyond it the streams'
# own threads keep every core busy, and a second frame thread per stream costs CPU, a
# decoder context's memory and OS threads for no speed (measured: docs/performance.md,
# "4 x 720p: one FFmpeg thread" and "Scale").
FILE_STREAMS_PER_CORE = 1
# ... or this many when every stream is a file read once to its end (no loop, no
# realtime pace): such a job lasts as long as its costliest file, and once the cheaper
# files end, a second frame thread lets the ones left use the cores they freed
# (measured: docs/performance.md, "Files read to the end").  A looping file has no
# end, so there the rule above holds.
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


# What the budget takes a fraction of where the device's RAM could not be read.
_ASSUMED_AVAILABLE_BYTES = 1 << 30


def choose_prefetch(
    work: Workload, count: int, profile: Profile, platform: Platform, prefetch_bytes: int | None
) -> tuple[int, int, str]:
    """The prefetch budget, the slot count it pays for, and why."""
    if prefetch_bytes is not None:
        budget_bytes, why = prefetch_bytes, "set by arguments"
    else:
        known = _available_bytes(platform)
        fraction_of = known or _ASSUMED_AVAILABLE_BYTES
        raw = int(fraction_of * profile.prefetch_fraction)
        budget_bytes = min(max(raw, profile.prefetch_min_bytes), profile.prefetch_max_bytes)
        of = (
            f"{format_mib(fraction_of)} available"
            if known
            else f"an assumed {format_mib(fraction_of)} (RAM unknown)"
        )
        why = (
            f"{profile.prefetch_fraction:.0%} of {of}, "
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
    # The reason says what the probe found, so `edgeload probe` shows one story: the
    # "hw decode" row and this line never disagree.
    found = ", ".join(platform.hw_decoders)
    if not platform.live:
        hardware = (
            f"hardware decode with {found}" if found
            else "its hardware decoders are not in this tree"
        )  # fmt: skip
        reasons["decode"] = (
            f"GStreamer, as the board's OpenCV (JetPack / distro) has it; {hardware} "
            "(OpenCV not inspected: not this machine)"
        )
        return "gstreamer"
    if opencv is None or not opencv.gstreamer:
        have = "OpenCV is not importable" if opencv is None else "this OpenCV has no GStreamer"
        reasons["decode"] = (
            f"GStreamer preferred for this board, but {have}: FFmpeg, software decode; "
            + gstreamer_opencv_fix(platform.family, opencv)
        )
        return "ffmpeg"
    reasons["decode"] = (
        f"OpenCV has GStreamer: hardware decode with {found}" if found
        else "OpenCV has GStreamer, but no hardware decoder was found: software decode"
    )  # fmt: skip
    return "gstreamer"


def gstreamer_opencv_fix(family: str, opencv: OpenCVInfo | None = None) -> str:
    """What gives a Jetson's or Pi's Python an OpenCV with GStreamer (the board's
    decoders and cameras); ``opencv``: the imported one, when it was probed."""
    if opencv is not None and opencv.shadows_system:
        # pip's wheel imported first hides the board's own build, which has GStreamer.
        return (
            f"pip's OpenCV ({opencv.path}) hides the board's ({opencv.system_path}): "
            "pip uninstall opencv-python opencv-python-headless"
        )
    if family == "raspberry_pi":
        # A venv sees the system's OpenCV only with the system's packages, and pip's
        # opencv-python there hides it.
        return (
            "install Pi OS's OpenCV (sudo apt install python3-opencv "
            "gstreamer1.0-libcamera); a venv sees it when made with --system-site-packages "
            "and without pip's opencv-python"
        )
    return (
        "use the OpenCV JetPack installs (JetPack's OpenCV has GStreamer), not pip's opencv-python"
    )


# Dataset tasks in flight per worker when ``prefetch_factor`` is not given: torch's 2,
# for thread workers too.  One would save a batch slot or two, but a consumer whose
# step stalls now and then, or uneven samples, leave the workers idle with one task
# each (measured: docs/performance.md, "Datasets: the bound of two bare threads, and
# slots refilled on delivery").
PREFETCH_PER_WORKER = 2


def tasks_in_flight(num_workers: int, prefetch_factor: int | None) -> int:
    """Most dataset tasks handed to workers and not yet yielded: ``prefetch_factor`` per
    worker (at least 1; by default :data:`PREFETCH_PER_WORKER`).

    The DataLoader bounds its tasks with it, and the plan sizes a dataset's slots by it.
    """
    if num_workers <= 0:
        return 0
    per_worker = PREFETCH_PER_WORKER if prefetch_factor is None else max(1, prefetch_factor)
    return num_workers * per_worker


# At least this many video batches in flight from 4 streams on (what 2 per stream gave
# 4): two (2 + 2 slots) cost 6-11 % more CPU per frame at 4 and 32 streams with a
# consumer that does nothing, which alone keeps about 7 of such a loader's 8 slots busy.
VIDEO_MIN_BATCHES_IN_FLIGHT = 8


def video_batches_in_flight(streams: int, batch: int) -> int:
    """Batches a video loader keeps in flight: two frames per stream in batches of
    ``batch``, at least :data:`VIDEO_MIN_BATCHES_IN_FLIGHT` (two per stream below 4).

    A batch per frame, as before, grew with streams squared: 66 slots of 32 frames at
    32 streams, 600 MiB that a consumer slower than decode fills.
    """
    two_frames_each = -(-2 * streams // max(1, batch))
    return min(2 * streams, max(VIDEO_MIN_BATCHES_IN_FLIGHT, two_frames_each))


def slot_count(in_flight: int, slot_bytes: int, budget_bytes: int | None) -> int:
    """How many slots a loader makes: one per item in flight, one for the batch the
    consumer holds and one being handed over, no more than ``budget_bytes`` holds
    (when both sizes are known), and never fewer than 2.

    Both loaders size their slot pools with it: the plan for a workload whose slot
    size it knows, the DataLoader once its first batch has shown the size.
    """
    count = in_flight + 2
    if slot_bytes and budget_bytes:
        count = min(count, budget_bytes // slot_bytes)
    return max(2, count)
