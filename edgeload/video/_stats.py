"""What a :class:`~edgeload.video.streams.StreamLoader` reports.

``stats()`` is for people and dashboards: per stream state, rates, drops, reconnects,
the last error and the exact pipeline OpenCV opened; for the loader the batch rate,
queue depth, frame age percentiles and bytes held.  What it saves for resume is in
:mod:`edgeload.video.streams`.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Sequence
from typing import Any

from ..errors import redact
from ..measure import percentile
from ._capture import rtsp_transport_used


class Telemetry:
    """What the consumer has received: counted as each batch is built, read by ``stats()``."""

    WINDOW = 2048
    """Recent frame ages kept for the percentiles."""

    def __init__(self) -> None:
        self.batches = 0
        self.ages: collections.deque[float] = collections.deque(maxlen=self.WINDOW)
        self.delivered_at: collections.deque[float] = collections.deque(maxlen=64)

    def delivered(self, ages: Sequence[float], now: float) -> None:
        """One batch reached the consumer at ``now`` with frames of these ages (ms)."""
        self.batches += 1
        self.ages.extend(ages)
        self.delivered_at.append(now)

    def report(self) -> dict[str, Any]:
        ages = list(self.ages)
        times = list(self.delivered_at)
        rate = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else 0.0
        return {
            "batches": self.batches,
            "batch_rate": round(rate, 2),
            "frame_age_ms": {
                "p50": round(percentile(ages, 50), 1) if ages else None,
                "p99": round(percentile(ages, 99), 1) if ages else None,
            },
        }


def _transport(src: Any, target: Any) -> str | None:
    if src.kind != "rtsp":
        return None
    if target.backend == "ffmpeg":  # the environment may name one
        return rtsp_transport_used(target.rtsp_transport)
    return str(target.rtsp_transport or "tcp")


def _stream_stats(stream: Any) -> dict[str, Any]:
    src, reader, target = stream.source, stream.reader, stream.target
    if reader is not None:
        target = reader.connection.target  # an RTSP pipeline is built for its codec at open
    now = time.monotonic()
    out: dict[str, Any] = {
        "id": stream.sid,
        "name": redact(src.name),
        "kind": src.kind,
        "backend": target.backend,
        "pipeline": redact(target.open_string),
        "rtsp_transport": _transport(src, target),
        "policy": src.policy,
        "state": "pending" if reader is None else reader.connection.phase.value,
        "delivered": stream.delivered,
        "drops": stream.drops,
    }
    if reader is not None:
        conn, frames = reader.connection, reader.frame_loop
        age = None if frames.last_frame_at is None else (now - frames.last_frame_at) * 1000
        out.update(
            frames=frames.frames,
            fps_measured=round(frames.fps_measured(), 2),
            fps_reported=frames.fps_reported,
            skipped=frames.skipped,
            late=frames.playhead.late,
            backlog=frames.backlog,
            unconverted=frames.unconverted,
            age_from=frames.age_from,
            # What the capture was opened with: the plan's count, or 1 for a small file.
            ffmpeg_threads=conn.ffmpeg_threads if target.backend == "ffmpeg" else None,
            reconnects=conn.reconnects,
            attempts=conn.attempts,
            last_error=None if conn.last_error is None else redact(conn.last_error.message),
            last_frame_age_ms=None if age is None else round(age, 1),
            retry_in_s=None if conn.retry_at is None else round(conn.retry_at - now, 2),
            position=frames.playhead.position,
        )
    if src.kind == "device":
        asked, opened = (
            target.camera_mode,
            None if reader is None else reader.connection.camera_opened,
        )
        out["camera_mode"] = {
            "asked": None if asked is None else asked.describe(),
            "opened": None if opened is None else opened.describe(),
        }
    return out


def loader_stats(
    streams: Sequence[Any],
    telemetry: Telemetry,
    mux: Any,
    *,
    deadline_ms: float,
    memory: tuple[str, str],
    plan: Any,
) -> dict[str, Any]:
    """The numbers behind ``StreamLoader.stats()``, from the loader's parts.

    ``mux`` holds the prefetcher and the assembler; ``memory`` is the slot memory mode
    and the reason for it; ``plan`` the loader's plan.
    """
    report = telemetry.report()
    pre = mux.prefetch.stats()
    pools = [p.stats() for p in mux.pools.all() if not p.closed]
    slot_bytes = sum(p.nbytes for p in pools)
    return {
        "batches": report["batches"],
        "batch_rate": report["batch_rate"],
        "queue_depth": pre.depth,
        "queue_drops": pre.drops,
        "slot_misses": mux.assembler.slot_misses,
        "frame_age_ms": report["frame_age_ms"],
        "frame_age_from": sorted(
            {s.reader.frame_loop.age_from for s in streams if s.reader is not None}
        ),
        "drops": sum(s.drops for s in streams),
        "bytes_held": pre.bytes_held,
        "slot_bytes": slot_bytes,
        "slot_copies": sum(p.copies for p in pools),
        "slot_gpu_waits": sum(p.gpu_waits for p in pools),
        "deadline_ms": deadline_ms,
        "memory_mode": memory[0],
        "memory_mode_reason": memory[1],
        "plan": plan.describe(),
        "streams": [_stream_stats(s) for s in streams],
    }
