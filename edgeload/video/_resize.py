"""Resize, letterbox and colour-convert one decoded frame straight into its batch place.

OpenCV writes into a ``dst=`` array when its shape and type match, so the frame goes
from the stream's decode buffer to the slot with no array of frame size made per
frame.  ``NCHW`` needs one transposing copy from a per-stream scratch image, which
is made once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from .._deps import require_cv2

Layout = Literal["NHWC", "NCHW"]
Color = Literal["bgr", "rgb"]
ResizeMode = Literal["stretch", "letterbox"]
LETTERBOX_FILL = 114  # the grey YOLO-family detectors are trained with


@dataclass(frozen=True)
class Geometry:
    """Where a decoded frame's picture lies in its batch place.

    An output pixel coordinate is ``pad + source coordinate * scale`` on each axis
    (continuous coordinates, as box corners are); the rest of the place is padding.
    """

    source_size: tuple[int, int]
    """The decoded frame's ``(width, height)``, pixels."""
    scale: tuple[float, float]
    """Output pixels per source pixel, ``(sx, sy)``: equal up to rounding for
    ``letterbox``, each side's own ratio for ``stretch``."""
    pad: tuple[int, int]
    """``(left, top)`` padding before the picture, output pixels (0 for ``stretch``)."""
    box: tuple[int, int, int, int]
    """``(top, left, height, width)`` of the picture inside the place, output pixels."""


def letterbox_size(
    source_size: tuple[int, int] | None, long_side: int, *, stride: int = 32
) -> tuple[int, int]:
    """The smallest ``(width, height)`` with each side a multiple of ``stride`` that a
    frame of ``source_size`` letterboxes into with its long side ``long_side``
    (Ultralytics' rectangular letterbox: 640x480 at 320 -> 320x256).

    ``source_size`` None (unknown, or streams of several aspects) gives the square,
    ``long_side`` rounded up to ``stride``.

    Args:
        source_size: the frames' ``(width, height)``, pixels, or None.
        long_side: the picture's long side in the output, pixels (a detector's imgsz).
        stride: the model's stride (32 for YOLO-family detectors); 1 for no rounding.

    Raises:
        ArgumentError: a size or stride below 1.
    """
    from ..errors import ArgumentError

    if long_side < 1 or stride < 1:
        raise ArgumentError(
            f"letterbox_size: size and stride must be >= 1, got size={long_side}, stride={stride}"
        )
    if source_size is not None and min(source_size) < 1:
        raise ArgumentError(f"letterbox_size: source_size must be > 0, got {source_size}")

    def up(n: int) -> int:
        return -(-n // stride) * stride

    if source_size is None:
        return up(long_side), up(long_side)
    w, h = source_size
    scale = long_side / max(w, h)
    return up(max(1, round(w * scale))), up(max(1, round(h * scale)))


class FrameWriter:
    """Writes frames of any input size into ``(H, W, 3)`` or ``(3, H, W)`` batch places.

    Args:
        size: output ``(width, height)``, pixels.
        layout: ``NHWC`` or ``NCHW`` (the slot's layout).
        color: ``bgr`` (OpenCV's order) or ``rgb``.
        resize: ``stretch`` to fill, or ``letterbox`` (keep the aspect ratio, pad grey).
    """

    def __init__(
        self, *, size: tuple[int, int], layout: Layout, color: Color, resize: ResizeMode
    ) -> None:
        self.size = size
        self.layout = layout
        self.color = color
        self.resize = resize
        w, h = size
        self._scratch = np.empty((h, w, 3), np.uint8) if layout == "NCHW" else None
        self._geometry: tuple[tuple[int, ...], Geometry] | None = None
        self._cv2: Any = None  # imported at the first write, then kept: one call less a frame

    def _box(self, shape: tuple[int, ...]) -> Geometry:
        """The geometry of a frame of array ``shape`` in the output, cached."""
        if self._geometry is not None and self._geometry[0] == shape:
            return self._geometry[1]
        w, h = self.size
        src_h, src_w = shape[0], shape[1]
        if self.resize == "stretch":
            box = (0, 0, h, w)
        else:
            scale = min(w / src_w, h / src_h)
            new_w, new_h = max(1, round(src_w * scale)), max(1, round(src_h * scale))
            box = ((h - new_h) // 2, (w - new_w) // 2, new_h, new_w)
        top, left, new_h, new_w = box
        # The scale each side really got (its rounded size over the source's), so a
        # mapped box lands on the pixels the resize wrote, not on the ideal ratio's.
        geometry = Geometry((src_w, src_h), (new_w / src_w, new_h / src_h), (left, top), box)
        self._geometry = (shape, geometry)
        return geometry

    def write(self, frame: np.ndarray, place: np.ndarray) -> Geometry:
        """Write BGR ``frame`` (H', W', 3) into ``place`` in the configured form; returns
        where its picture went (the place's :class:`Geometry`)."""
        cv2 = self._cv2
        if cv2 is None:
            cv2 = self._cv2 = require_cv2()
        hwc = self._scratch if self._scratch is not None else place
        geometry = self._geometry  # the cached box, looked at here: one call less a frame
        placed = (
            geometry[1] if geometry is not None and geometry[0] == frame.shape
            else self._box(frame.shape)
        )  # fmt: skip
        top, left, h, w = placed.box
        if (h, w) == hwc.shape[:2]:
            inner = hwc  # the picture fills the place: no view to make (once per frame)
        else:
            # Pad only the borders; the picture area is overwritten below.
            hwc[:top] = LETTERBOX_FILL
            hwc[top + h :] = LETTERBOX_FILL
            hwc[top : top + h, :left] = LETTERBOX_FILL
            hwc[top : top + h, left + w :] = LETTERBOX_FILL
            inner = hwc[top : top + h, left : left + w]
        if frame.shape[:2] == (h, w):
            np.copyto(inner, frame)
        else:
            cv2.resize(frame, (w, h), dst=inner, interpolation=cv2.INTER_LINEAR)
        if self.color == "rgb":
            cv2.cvtColor(inner, cv2.COLOR_BGR2RGB, dst=inner)
        if self._scratch is not None:
            np.copyto(place, self._scratch.transpose(2, 0, 1))
        return placed
