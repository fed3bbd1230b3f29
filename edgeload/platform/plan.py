"""The plan: the concrete numbers for one loader on this device, each with its reason.

``plan_for`` takes a platform (from :func:`edgeload.platform.probe.probe`), its merged profile
and a workload (N video streams of a frame size, or dataset items of a size) and
decides worker kind and count, thread counts whose sum fits the usable cores, the
prefetch budget and slot count, the memory mode and the decode backend.  A plan is
printable, so ``edgeload probe`` can show a user why it chose what it chose.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ArgumentError
from ..vocabulary import DecodeBackend, MemoryMode, WorkerKind
from ._decide import (
    PROCESS_WORKER_BYTES,
    choose_decode_backend,
    choose_memory_mode,
    choose_prefetch,
    choose_threads,
    choose_workers,
    describe_workload,
    fit_shm,
    format_mib,
    usable_cores,
)
from ._in_flight import slot_count, tasks_in_flight
from .facts import Platform
from .profile import Profile, load_profile

__all__ = [
    "PROCESS_WORKER_BYTES",
    "Plan",
    "Threads",
    "format_mib",
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
        finite: for video files (``live=False``), every one is read once to its end
            (no loop, no realtime pace), so the job lasts as long as its costliest file.
        prefetch_bytes: an explicit prefetch budget, bytes; overrides the profile's fraction.
        **overrides: profile keys (``worker_kind``, ``num_workers``, ``memory_mode``,
            ``decode_backend``, ``thread_budget``) that win over every profile.

    Raises:
        ProfileError: an override has a bad value.
        ArgumentError: ``prefetch_bytes`` is negative.
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
    )
