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
        self._yuv_scratch: np.ndarray | None = None  # a YUV plane scaled to the picture
        self.yuv = ""
        """``I420``/``NV12``: frames arrive as one (H*3/2, W) YUV plane from a GStreamer
        pipeline of edgeload's, scaled or as decoded; '' for BGR (H, W, 3)."""
        self.source_size: tuple[int, int] | None = None
        """The decoded picture's ``(width, height)`` when a pipeline scaled the YUV
        plane before OpenCV; None: the plane is the picture as decoded."""

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

    def follow(self, target: Any) -> None:
        """Take what an opened capture hands over from its ``target``: ``yuv``, the
        plane's layout, and ``source_size``, the decoded picture's size when the
        pipeline scaled it before OpenCV (so boxes map back to the camera's pixels)."""
        self.yuv = target.yuv
        self.source_size = target.source_size if target.yuv else None

    def write(self, frame: np.ndarray, place: np.ndarray) -> Geometry:
        """Write BGR ``frame`` (H', W', 3), or a YUV plane (see ``yuv``), into ``place``
        in the configured form; returns where its picture went (the place's
        :class:`Geometry`)."""
        cv2 = self._cv2
        if cv2 is None:
            cv2 = self._cv2 = require_cv2()
        if frame.ndim == 2 and self.yuv:
            return self._write_yuv(cv2, frame, place)
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

    def _write_yuv(self, cv2: Any, frame: np.ndarray, place: np.ndarray) -> Geometry:
        """One ``cv2.cvtColor`` from the YUV plane into the picture's place.  A plane
        not at the picture's size (software decode hands over the decoded size) is
        scaled first, plane by plane; with an odd side, converted and then resized.  The
        geometry is the decoded picture's (``source_size``), not the scaled plane's."""
        hwc = self._scratch if self._scratch is not None else place
        plane = (frame.shape[0] * 2 // 3, frame.shape[1])
        source = self.source_size
        placed = self._box(plane if source is None else (source[1], source[0]))
        top, left, h, w = placed.box
        if (h, w) != hwc.shape[:2]:
            hwc[:top] = LETTERBOX_FILL
            hwc[top + h :] = LETTERBOX_FILL
            hwc[top : top + h, :left] = LETTERBOX_FILL
            hwc[top : top + h, left + w :] = LETTERBOX_FILL
        inner = hwc[top : top + h, left : left + w]
        code = _YUV_CODES[(self.yuv, self.color)]
        if plane == (h, w):
            cv2.cvtColor(frame, getattr(cv2, code), dst=inner)
        elif not (h % 2 or w % 2 or plane[0] % 2 or plane[1] % 2):
            # Scale the planes, then convert the few pixels left: less CPU than
            # videoscale in the pipeline (docs/performance.md).
            small = self._scale_yuv(cv2, frame, plane, (h, w))
            cv2.cvtColor(small, getattr(cv2, code), dst=inner)
        else:
            # An odd side has no 4:2:0 plane: convert at full size, then resize.
            full = cv2.cvtColor(frame, getattr(cv2, code))
            cv2.resize(full, (w, h), dst=inner, interpolation=cv2.INTER_LINEAR)
        if self._scratch is not None:
            np.copyto(place, self._scratch.transpose(2, 0, 1))
        return placed

    def _scale_yuv(
        self, cv2: Any, frame: np.ndarray, plane: tuple[int, int], size: tuple[int, int]
    ) -> np.ndarray:
        """The (H*3/2, W) YUV ``frame`` with a picture of ``plane`` ``(h, w)`` scaled to
        ``size``, plane by plane (``INTER_LINEAR``, as a BGR frame is), into a scratch
        plane kept for the next frame."""
        (src_h, src_w), (h, w) = plane, size
        if self._yuv_scratch is None or self._yuv_scratch.shape != (h * 3 // 2, w):
            self._yuv_scratch = np.empty((h * 3 // 2, w), np.uint8)
        src, dst = frame.reshape(-1), self._yuv_scratch.reshape(-1)
        linear = cv2.INTER_LINEAR
        cv2.resize(frame[:src_h], (w, h), dst=self._yuv_scratch[:h], interpolation=linear)
        # Chroma: I420 has two (h/2, w/2) planes after Y; NV12 one of interleaved pairs.
        # Each is a contiguous run of the buffer, whatever h % 4 is.
        src_c, dst_c = src_h * src_w // 4, h * w // 4
        if self.yuv == "NV12":
            uv_src = src[src_h * src_w :][: 2 * src_c].reshape(src_h // 2, src_w // 2, 2)
            uv_dst = dst[h * w :][: 2 * dst_c].reshape(h // 2, w // 2, 2)
            cv2.resize(uv_src, (w // 2, h // 2), dst=uv_dst, interpolation=linear)
        else:
            for i in range(2):
                c_src = src[src_h * src_w + i * src_c :][:src_c].reshape(src_h // 2, src_w // 2)
                c_dst = dst[h * w + i * dst_c :][:dst_c].reshape(h // 2, w // 2)
                cv2.resize(c_src, (w // 2, h // 2), dst=c_dst, interpolation=linear)
        return self._yuv_scratch


_YUV_CODES = {
    ("I420", "bgr"): "COLOR_YUV2BGR_I420",
    ("I420", "rgb"): "COLOR_YUV2RGB_I420",
    ("NV12", "bgr"): "COLOR_YUV2BGR_NV12",
    ("NV12", "rgb"): "COLOR_YUV2RGB_NV12",
}
