"""What a :class:`~edgeload.video.streams.StreamLoader` reports and saves.

``stats()`` is for people and dashboards: per stream state, rates, drops, reconnects,
the last error and the exact pipeline OpenCV opened; for the loader the batch rate,
queue depth, frame age percentiles and bytes held.  ``state_dict()`` is for resume:
each file stream's next frame index, as plain ints and strings.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from .._compat import zip_strict
from ..checkpoint import KEY_VERSION, check_version
from ..measure import percentile
from ._ffmpeg import rtsp_transport_used

if TYPE_CHECKING:
    from .streams import StreamLoader

STATE_VERSION = 1

KEY_STREAMS = "streams"
KEY_URI = "uri"
KEY_FRAME = "frame"


def _transport(src: Any, target: Any) -> str | None:
    if src.kind != "rtsp":
        return None
    if target.backend == "ffmpeg":  # the environment may name one
        return rtsp_transport_used(target.rtsp_transport)
    return str(target.rtsp_transport or "tcp")


def _stream_stats(stream: Any) -> dict[str, Any]:
    src, reader, target = stream.source, stream.reader, stream.target
    now = time.monotonic()
    out: dict[str, Any] = {
        "id": stream.sid,
        "name": src.name,
        "kind": src.kind,
        "backend": target.backend,
        "pipeline": target.open_string,
        "rtsp_transport": _transport(src, target),
        "policy": src.policy,
        "state": "pending" if reader is None else reader.state.value,
        "delivered": stream.delivered,
        "drops": stream.drops,
    }
    if reader is not None:
        age = None if reader.last_frame_at is None else (now - reader.last_frame_at) * 1000
        out.update(
            frames=reader.frames,
            fps_measured=round(reader.fps_measured(), 2),
            fps_reported=reader.fps_reported,
            skipped=reader.skipped,
            late=reader.late,
            backlog=reader.backlog,
            unconverted=reader.unconverted,
            age_from=reader.age_from,
            reconnects=reader.reconnects,
            attempts=reader.attempts,
            last_error=reader.last_error,
            last_frame_age_ms=None if age is None else round(age, 1),
            retry_in_s=None if reader.retry_at is None else round(reader.retry_at - now, 2),
            position=reader.position,
        )
    return out


def loader_stats(loader: StreamLoader) -> dict[str, Any]:
    """The numbers behind ``StreamLoader.stats()``."""
    with loader._lock:
        streams = list(loader._streams.values())
    ages = list(loader._ages) if loader._ages else None
    times = list(loader._delivered_at)
    rate = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else 0.0
    pre = loader._prefetch.stats()
    pools = [p.stats() for p in loader._asm.pools() if not p.closed]
    slot_bytes = sum(p.nbytes for p in pools)
    return {
        "batches": loader._batches,
        "batch_rate": round(rate, 2),
        "queue_depth": pre.depth,
        "queue_drops": pre.drops,
        "slot_misses": loader._asm.slot_misses,
        "frame_age_ms": {
            "p50": None if ages is None else round(percentile(ages, 50), 1),
            "p99": None if ages is None else round(percentile(ages, 99), 1),
        },
        "frame_age_from": sorted({s.reader.age_from for s in streams if s.reader is not None}),
        "drops": sum(s.drops for s in streams),
        "bytes_held": pre.bytes_held,
        "slot_bytes": slot_bytes,
        "slot_copies": sum(p.copies for p in pools),
        "slot_gpu_waits": sum(p.gpu_waits for p in pools),
        "deadline_ms": loader.deadline_ms,
        "memory_mode": loader._mode,
        "memory_mode_reason": loader._mode_reason,
        "plan": loader.plan.describe(),
        "streams": [_stream_stats(s) for s in streams],
    }


def loader_state(loader: StreamLoader) -> dict[str, Any]:
    """The numbers behind ``StreamLoader.state_dict()``."""
    with loader._lock:
        streams = list(loader._streams.values())
    return {
        KEY_VERSION: STATE_VERSION,
        KEY_STREAMS: [
            {KEY_URI: str(s.source.uri), KEY_FRAME: s.last_seq + 1}
            for s in streams
            if s.source.kind == "file"
        ],
    }


def load_loader_state(loader: StreamLoader, state: dict[str, Any]) -> None:
    """The work behind ``StreamLoader.load_state_dict()``."""
    if loader._started:
        raise ValueError(
            "StreamLoader.load_state_dict() must come before iteration starts; "
            "make a new loader and load the state into it"
        )
    check_version(state, "StreamLoader", STATE_VERSION)
    files = [s for s in loader._streams.values() if s.source.kind == "file"]
    saved = state.get(KEY_STREAMS, [])
    if [str(s.source.uri) for s in files] != [e[KEY_URI] for e in saved]:
        raise ValueError(
            f"StreamLoader state is for files {[e[KEY_URI] for e in saved]}, this loader has "
            f"{[str(s.source.uri) for s in files]}; give the same file sources in the same order"
        )
    for stream, entry in zip_strict(files, saved):
        stream.last_seq = int(entry[KEY_FRAME]) - 1
