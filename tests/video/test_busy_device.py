"""A camera another program captures from is reported busy, fast, with its path.

The camera is a FUSE file at a free ``/dev/videoN`` whose ``VIDIOC_REQBUFS`` answers
EBUSY, as a V4L2 driver answers a second program (see tests/_fuse_device.py: no V4L2
module can be loaded on CI's VMs).  It opens fine, as a held camera does, so only the
ioctl tells.
"""

from __future__ import annotations

import time
from typing import Iterator

import pytest
from _fuse_device import FuseDevice, Unavailable, free_video_path
from _servers import first_source_error

from edgeload.video import StreamLoader, VideoSource


def _device(*, busy: bool) -> Iterator[FuseDevice]:
    try:
        device = FuseDevice(free_video_path(), busy=busy)
        device.start()
    except Unavailable as exc:
        pytest.skip(f"no FUSE stand-in for a camera here: {exc}")
    try:
        yield device
    finally:
        device.close()
    assert device.error is None, f"the FUSE stand-in failed: {device.error!r}"


@pytest.fixture
def held_camera() -> Iterator[FuseDevice]:
    yield from _device(busy=True)


@pytest.fixture
def not_a_camera() -> Iterator[FuseDevice]:
    yield from _device(busy=False)


def test_a_held_camera_raises_busy_naming_the_device(held_camera):
    error, took = first_source_error(VideoSource(held_camera.path))
    assert f"device '{held_camera.path}' is busy" in str(error)
    assert took < 15  # one ioctl; before, OpenCV's open failed with no cause
    # a camera index names the same node
    number = int(held_camera.path[len("/dev/video") :])
    error, _ = first_source_error(VideoSource(number))
    assert f"device '{held_camera.path}' is busy" in str(error)


def test_a_held_camera_keeps_retrying_with_busy_in_stats(held_camera):
    source = VideoSource(held_camera.path, backoff_s=(0.1, 0.2))
    valid: list[bool] = []
    with StreamLoader([source], size=(32, 32), deadline_ms=100, timeout_s=30) as loader:
        start = time.monotonic()
        for batch in loader:
            valid += batch.valid.tolist()
            if time.monotonic() - start > 1.5:
                break
        stats = loader.stats()["streams"][0]
    assert valid and not any(valid)  # empty batches at the deadline, nothing raised
    assert "is busy" in stats["last_error"] and held_camera.path in stats["last_error"]
    assert stats["attempts"] >= 2


def test_a_node_that_is_not_v4l2_is_not_called_busy(not_a_camera):
    # Its VIDIOC_REQBUFS fails with ENOTTY: no finding, OpenCV tries and fails on its own.
    error, _ = first_source_error(VideoSource(not_a_camera.path))
    assert not_a_camera.path in str(error)
    assert "busy" not in str(error)
