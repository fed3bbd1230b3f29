"""What the consumer gets from a :class:`~edgeload.video.streams.StreamLoader`: a
:class:`Batch` of frames and a :class:`FrameMeta` per place."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FrameMeta:
    """What the consumer knows about one frame of a batch."""

    stream_id: int
    seq: int
    """The source's own frame number; a gap from the stream's previous frame is a drop."""
    pts_ms: float
    captured_at: float
    """``time.monotonic()`` of its capture, as the stream's ``age_from`` in
    ``stats()`` says: ``pts`` (its timestamps), ``schedule`` (realtime replay) or
    ``grab`` (when edgeload grabbed it); see :mod:`edgeload.video._reader`."""
    age_ms: float
    """Milliseconds from ``captured_at`` to delivery to the consumer."""
    dropped: int
    """Frames of this stream dropped (or skipped by ``fps``) since its previous one."""


@dataclass(frozen=True)
class Batch:
    """One batch: ``frames`` (uint8 tensor), ``valid`` (bool tensor) and ``meta`` per place."""

    frames: Any
    """``(B, H, W, 3)`` or ``(B, 3, H, W)`` uint8 torch tensor, a view of the slot."""
    valid: Any
    """``(B,)`` bool torch tensor: which places hold a frame (a partial batch has gaps)."""
    meta: tuple[FrameMeta | None, ...]
    """Per place: its frame's metadata, or None where ``valid`` is False."""
