"""A Raspberry Pi camera module read through picamera2, where OpenCV cannot reach it.

On Pi OS Bookworm and later the camera modules are libcamera devices: OpenCV's V4L2
backend cannot read them, and its GStreamer backend reads them only through libcamera's
element (``libcamerasrc``, in ``gstreamer1.0-libcamera``, which Pi OS does not install
by default).  Pi OS does install picamera2 (``python3-picamera2``).  So ``csi://N`` on
a Pi opens ``libcamerasrc`` where OpenCV has GStreamer and the element exists, and
otherwise camera N through picamera2 (:func:`~edgeload.video._capture.build_target`
chooses).

The ISP scales to the loader's size (the letterbox's inner box) at the asked rate and
writes B,G,R pixels: the frame writer then only copies them into the slot (or swaps to
RGB), as for any OpenCV capture.

:class:`PiCameraCapture` is the part of ``cv2.VideoCapture`` the reader drives
(``grab``/``retrieve``/``read``/``get``/``set``/``release``/``isOpened``), so the reader,
its reconnects and its stats are the same for every source.

What this relies on, from picamera2's source (``raspberrypi/picamera2``, 0.3.x):

- ``Picamera2.global_camera_info()`` lists the cameras, the CSI ones before USB ones,
  and ``Picamera2(n)`` opens the n-th of that list (IndexError past its end);
- ``create_video_configuration(main={"size": (w, h), "format": "RGB888"}, controls=...)``:
  sizes must be even; ``RGB888`` is B,G,R in memory, a ``(h, w, 3)`` array (a padded
  stride is copied away); ``FrameDurationLimits`` (microseconds, shortest and longest)
  fixes the sensor's rate;
- ``capture_array("main", wait=False)`` returns a job, ``wait(job, timeout)`` its array
  or raises ``TimeoutError``;
- ``stop()`` then ``close()`` give the camera back to libcamera.

No Pi camera exists where the tests run (nor a libcamera virtual camera: it needs
udmabuf or a DMA heap): this module is checked against those facts as text, and the
choice of path and its errors through :func:`~edgeload.video._capture.build_target`.
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import logging
from typing import Any

from .._deps import require_cv2
from ..errors import SourceError

_log = logging.getLogger(__name__)

FORMAT = "RGB888"
"""picamera2's name for B,G,R bytes: OpenCV's order, so the frame writer only copies."""

# picamera2's wait() raises the future's TimeoutError: on Python 3.8-3.10 that is
# concurrent.futures' own class, not the builtin.
_TIMEOUTS = (TimeoutError, concurrent.futures.TimeoutError)


def installed() -> bool:
    """Whether picamera2 can be imported here (without importing it: that starts
    libcamera's camera manager)."""
    try:
        return importlib.util.find_spec("picamera2") is not None
    except (ImportError, ValueError):
        return False


def describe(index: int, size: tuple[int, int], fps: float) -> str:
    """What stats and ``edgeload probe`` show for a camera read through picamera2."""
    return f"picamera2 camera {index}: main {FORMAT} {size[0]}x{size[1]} at {fps:g} fps"


def video_configuration(size: tuple[int, int], fps: float) -> dict[str, Any]:
    """The arguments of ``create_video_configuration`` for ``size`` at ``fps``."""
    frame_us = round(1_000_000 / fps)
    return {
        "main": {"size": tuple(size), "format": FORMAT},
        "controls": {"FrameDurationLimits": (frame_us, frame_us)},
    }


def open_camera(
    index: int, size: tuple[int, int], fps: float, *, read_timeout_s: float
) -> PiCameraCapture:
    """Open, configure and start Pi camera ``index`` through picamera2.

    Raises:
        SourceError: picamera2 does not import, or camera ``index`` does not exist
            (opening again would not help).
        RuntimeError: picamera2 could not open or start it (held by another program,
            or a libcamera fault): the reader retries.
    """
    try:
        from picamera2 import Picamera2  # Pi OS's python3-picamera2
    except ImportError as exc:
        # pip's picamera2 in a venv without the system's packages: libcamera's bindings
        # (and pykms) exist only as Pi OS packages.
        raise SourceError(
            f"video source 'csi://{index}': picamera2 cannot be imported here ({exc}); "
            "install Pi OS's (sudo apt install python3-picamera2): a venv sees it, with "
            "the libcamera bindings it needs, when made with --system-site-packages",
            source=f"csi://{index}",
        ) from exc
    cameras = Picamera2.global_camera_info()
    if index >= len(cameras):
        have = ", ".join(f"{i}: {c.get('Model', '?')}" for i, c in enumerate(cameras))
        raise SourceError(
            f"video source 'csi://{index}': no Raspberry Pi camera {index} (picamera2 lists "
            f"{have or 'none'}); check the ribbon cable and `rpicam-hello --list-cameras`",
            source=f"csi://{index}",
        )
    try:
        camera = Picamera2(index)
    except RuntimeError as exc:
        raise RuntimeError(
            f"picamera2 could not open camera {index} ({exc}); another program (rpicam-*, "
            "a libcamera or picamera2 script) may hold it: close it"
        ) from exc
    try:
        camera.configure(camera.create_video_configuration(**video_configuration(size, fps)))
        camera.start()
    except Exception:
        _close(camera)
        raise
    return PiCameraCapture(camera, size=size, fps=fps, read_timeout_s=read_timeout_s)


def _close(camera: Any) -> None:
    for step in (camera.stop, camera.close):
        try:
            step()
        except Exception as exc:  # closing must not raise over the fault being handled
            _log.debug("edgeload: picamera2 %s failed: %r", step.__name__, exc)


class PiCameraCapture:
    """A started picamera2 camera as the reader's capture: each ``grab`` waits at most
    ``read_timeout_s`` for the next frame (False after that: the reader reopens it)."""

    def __init__(
        self, camera: Any, *, size: tuple[int, int], fps: float, read_timeout_s: float
    ) -> None:
        self._camera: Any = camera
        self._size, self._fps, self._timeout_s = size, fps, read_timeout_s
        self._frame: Any = None

    def isOpened(self) -> bool:  # cv2.VideoCapture's name
        return self._camera is not None

    def grab(self) -> bool:
        self._frame = None
        if self._camera is None:
            return False
        job = self._camera.capture_array("main", wait=False)
        try:
            self._frame = self._camera.wait(job, timeout=self._timeout_s)
        except _TIMEOUTS:
            return False
        return True

    def retrieve(self, image: Any = None) -> tuple[bool, Any]:
        # picamera2 makes a new array for every frame: it is handed on as it is.
        return self._frame is not None, self._frame

    def read(self, image: Any = None) -> tuple[bool, Any]:
        return self.retrieve() if self.grab() else (False, None)

    def get(self, prop: int) -> float:
        cv2 = require_cv2()
        return {
            cv2.CAP_PROP_FRAME_WIDTH: float(self._size[0]),
            cv2.CAP_PROP_FRAME_HEIGHT: float(self._size[1]),
            cv2.CAP_PROP_FPS: float(self._fps),
        }.get(prop, 0.0)

    def set(self, prop: int, value: float) -> bool:
        return False  # the configuration is fixed once started, as a pipeline's caps

    def release(self) -> None:
        camera, self._camera, self._frame = self._camera, None, None
        if camera is not None:
            _close(camera)
