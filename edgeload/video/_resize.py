"""Resize, letterbox and colour-convert one decoded frame straight into its batch place.

OpenCV writes into a ``dst=`` array when its shape and type match, so the frame goes
from the stream's decode buffer to the slot with no array of frame size made per
frame.  ``NCHW`` needs one transposing copy from a per-stream scratch image, which
is made once.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from .._deps import require_cv2

Layout = Literal["NHWC", "NCHW"]
Color = Literal["bgr", "rgb"]
ResizeMode = Literal["stretch", "letterbox"]
LETTERBOX_FILL = 114  # the grey YOLO-family detectors are trained with


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
        self._geometry: tuple[tuple[int, ...], tuple[int, int, int, int]] | None = None
        self._cv2: Any = None  # imported at the first write, then kept: one call less a frame
        self.yuv = ""
        """``I420``/``NV12``: frames arrive as one (H*3/2, W) YUV plane (a GStreamer
        pipeline of edgeload's scaled them); '' for BGR (H, W, 3)."""

    def _box(self, shape: tuple[int, ...]) -> tuple[int, int, int, int]:
        """``(top, left, height, width)`` of the picture inside the output, cached."""
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
        self._geometry = (shape, box)
        return box

    def write(self, frame: np.ndarray, place: np.ndarray) -> None:
        """Write BGR ``frame`` (H', W', 3), or a YUV plane (see ``yuv``), into ``place``
        in the configured form."""
        cv2 = self._cv2
        if cv2 is None:
            cv2 = self._cv2 = require_cv2()
        if frame.ndim == 2 and self.yuv:
            self._write_yuv(cv2, frame, place)
            return
        hwc = self._scratch if self._scratch is not None else place
        geometry = self._geometry  # the cached box, looked at here: one call less a frame
        if geometry is not None and geometry[0] == frame.shape:
            top, left, h, w = geometry[1]
        else:
            top, left, h, w = self._box(frame.shape)
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

    def _write_yuv(self, cv2: Any, frame: np.ndarray, place: np.ndarray) -> None:
        """One ``cv2.cvtColor`` from the YUV plane into the picture's place; a plane not
        at the picture's size (the pipeline could not ask for it) is resized after."""
        hwc = self._scratch if self._scratch is not None else place
        shape = (frame.shape[0] * 2 // 3, frame.shape[1])
        top, left, h, w = self._box(shape)
        if (h, w) != hwc.shape[:2]:
            hwc[:top] = LETTERBOX_FILL
            hwc[top + h :] = LETTERBOX_FILL
            hwc[top : top + h, :left] = LETTERBOX_FILL
            hwc[top : top + h, left + w :] = LETTERBOX_FILL
        inner = hwc[top : top + h, left : left + w]
        code = _YUV_CODES[(self.yuv, self.color)]
        if shape == (h, w):
            cv2.cvtColor(frame, getattr(cv2, code), dst=inner)
        else:
            full = cv2.cvtColor(frame, getattr(cv2, code))
            cv2.resize(full, (w, h), dst=inner, interpolation=cv2.INTER_LINEAR)
        if self._scratch is not None:
            np.copyto(place, self._scratch.transpose(2, 0, 1))


_YUV_CODES = {
    ("I420", "bgr"): "COLOR_YUV2BGR_I420",
    ("I420", "rgb"): "COLOR_YUV2RGB_I420",
    ("NV12", "bgr"): "COLOR_YUV2BGR_NV12",
    ("NV12", "rgb"): "COLOR_YUV2RGB_NV12",
}
