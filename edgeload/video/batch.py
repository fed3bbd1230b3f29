"""What the consumer gets from a :class:`~edgeload.video.streams.StreamLoader`: a
:class:`Batch` of frames and a :class:`FrameMeta` per place."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ArgumentError

if TYPE_CHECKING:  # a runtime import would load the CUDA modules early
    from ..cuda.engine import Engine


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
    source_size: tuple[int, int]
    """The decoded frame's ``(width, height)``, pixels, before resizing."""
    scale: tuple[float, float]
    """Output pixels per source pixel, ``(sx, sy)``: one ratio (up to rounding of the
    picture's sides) for ``letterbox``, each side's own for ``stretch``."""
    pad: tuple[int, int]
    """``(left, top)`` grey padding before the picture, output pixels (0 for ``stretch``)."""

    def to_source(self, boxes: Any) -> Any:
        """Map xyxy ``boxes`` in output pixels to this frame's source pixels.

        ``x_source = (x - pad_left) / sx`` (and so for y), clipped to the source frame
        ``[0, width] x [0, height]``: a detector's boxes on a letterboxed or stretched
        batch, in the camera's own frame.

        Args:
            boxes: ``(N, 4)`` (or ``(4,)``) xyxy, a torch tensor (any device) or numpy
                array.

        Returns:
            The same kind (torch tensor on the same device, or numpy array) and shape,
            floating point.

        Raises:
            ArgumentError: ``boxes`` is not a tensor or array whose last dimension is 4.
        """
        shape = tuple(getattr(boxes, "shape", ()))
        if not hasattr(boxes, "shape") or len(shape) not in (1, 2) or shape[-1] != 4:
            raise ArgumentError(
                f"FrameMeta.to_source: boxes must be an (N, 4) xyxy torch tensor or numpy "
                f"array, got {type(boxes).__name__} of shape {shape or 'none'}"
            )
        (sx, sy), (left, top) = self.scale, self.pad
        width, height = self.source_size
        if isinstance(boxes, np.ndarray):
            out = boxes.astype(np.float64 if boxes.dtype == np.float64 else np.float32)
            scale = np.array([sx, sy, sx, sy], out.dtype)
            offset = np.array([left, top, left, top], out.dtype)
            out = (out - offset) / scale
            np.clip(out[..., 0::2], 0, width, out=out[..., 0::2])
            np.clip(out[..., 1::2], 0, height, out=out[..., 1::2])
            return out
        dtype = boxes.dtype if boxes.is_floating_point() else None
        out = boxes.float() if dtype is None else boxes.clone()
        out[..., 0::2] = ((out[..., 0::2] - left) / sx).clamp(0, width)
        out[..., 1::2] = ((out[..., 1::2] - top) / sy).clamp(0, height)
        return out


@dataclass(frozen=True)
class Batch:
    """One batch: ``frames`` (a tensor), ``valid`` (bool tensor) and ``meta`` per place."""

    frames: Any
    """``(B, H, W, 3)`` or ``(B, 3, H, W)`` torch tensor: uint8, a view of the slot; or
    of the loader's ``dtype`` (float values in [0, 1], normalised with its ``mean``
    and ``std``)."""
    valid: Any
    """``(B,)`` bool torch tensor: which places hold a frame (a partial batch has gaps)."""
    meta: tuple[FrameMeta | None, ...]
    """Per place: its frame's metadata, or None where ``valid`` is False."""

    def to(self, device: Any, *, non_blocking: bool = False, engine: Engine | None = None) -> Batch:
        """This batch with ``frames`` and ``valid`` on ``device``.

        The copy reads the slot; the slot stays leased until the copy has read it, so a
        non-blocking copy of a uint8 view is never of a rewritten batch (the rule the
        loader's own ``device=`` follows).  A batch already there is returned as is.

        Args:
            device: a torch device (``"cuda"``, ``"cuda:1"``, ``"cpu"``).
            non_blocking: queue the copy and return at once (pinned or GPU memory slots).
            engine: the GPU engine (default: CUDA through torch;
                ``edgeload.cuda.host_engine.HostEngine`` for tests).

        Raises:
            PlatformError: ``device`` is a CUDA device this machine lacks.
        """
        if str(device) == "cpu":
            if self.frames.device.type == "cpu":
                return self
            return Batch(self.frames.to("cpu"), self.valid.to("cpu"), self.meta)
        from ..cuda._lease import record_gpu_use
        from ..cuda.engine import default_engine

        engine = engine if engine is not None else default_engine()
        if engine.is_device_tensor(self.frames):
            return self
        target = engine.check_device(device)
        frames = self.frames
        moved = engine.to_device(frames, target, non_blocking=non_blocking)
        moved_valid = engine.to_device(self.valid, target, non_blocking=non_blocking)
        # A slot of GPU-registered memory is fenced on the copy's stream: the pool fences
        # a dropped slot only on the dropping thread's stream then, which need not be
        # the copy's.  (A copy from ordinary host memory is staged before it returns.)
        record_gpu_use(frames, stream=engine.current_stream())
        return Batch(moved, moved_valid, self.meta)
