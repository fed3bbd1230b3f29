"""A small file decodes with one FFmpeg thread, a large one with the count it was given.

The truth is FFmpeg's own frame threads, counted in ``/proc/self/task`` while the stream
reads: by name (``av:h264:df<N>``) where libavcodec names them (the FFmpeg in OpenCV 5's
wheels), else as the native threads the read added that are not Python's (FFmpeg 5.1 in
OpenCV 4.9's wheels, JetPack 6's FFmpeg 4.4: unnamed). stats() must say the same.
"""

from __future__ import annotations

import os
import threading

import pytest
from _media import clip, media_dir

from edgeload.platform.profile import Profile
from edgeload.video import StreamLoader, VideoSource

# Internal: FFmpeg's threads are counted for one reader alone, with a thread count the
# loader would choose itself.
from edgeload.video._capture import SMALL_FILE_PIXELS, build_target, capture_features
from edgeload.video._reader import StreamReader

pytestmark = pytest.mark.skipif(
    not capture_features().n_threads,
    reason="this OpenCV (before 4.7) cannot set FFmpeg's threads per capture",
)


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    root = media_dir(tmp_path_factory)
    return {
        "small": clip(root, size=(320, 240), fps=30, seconds=1.0),
        "large": clip(root, size=(1280, 720), fps=30, seconds=1.0),
    }


def _tasks() -> dict[int, str]:
    names = {}
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                names[int(task)] = f.read().strip()
        except OSError:  # the thread ended while listed
            pass
    return names


@pytest.fixture(scope="module")
def named(clips):
    """Whether this OpenCV's FFmpeg names its frame threads: a plain 2-thread capture."""
    import cv2

    cap = cv2.VideoCapture(str(clips["large"]), cv2.CAP_FFMPEG, [cv2.CAP_PROP_N_THREADS, 2])
    try:
        assert all(cap.read()[0] for _ in range(5))
        return any(n.startswith("av:h264:df") for n in _tasks().values())
    finally:
        cap.release()


def _frame_threads(before: dict[int, str], named: bool) -> int:
    now = _tasks()
    if named:
        return sum(n.startswith("av:h264:df") for n in now.values())
    python = {t.native_id for t in threading.enumerate()}
    return sum(task not in before and task not in python for task in now)


def _read(path, threads, named):
    """Read the file in a reader given ``threads``; FFmpeg's frame threads at frame 5."""
    source = VideoSource(path)
    target = build_target(source.kind, source.value, backend="ffmpeg", preferred="ffmpeg",
                          decoder="software")  # fmt: skip
    seen: list[int] = []
    before = _tasks()

    def sink(frame, seq, pts_ms, captured_at):
        if seq == 5:
            seen.append(_frame_threads(before, named))
        return True

    reader = StreamReader(source, target, stream_id=0, sink=sink, ffmpeg_threads=threads)
    reader.start()
    assert reader.join(30)
    assert reader.frame_loop.frames == 30, reader.connection.last_error
    return reader.connection.ffmpeg_threads, seen[0]


def test_small_file_opens_with_one_ffmpeg_thread_large_keeps_the_count(clips, named):
    assert 320 * 240 <= SMALL_FILE_PIXELS < 1280 * 720
    assert _read(clips["small"], 2, named) == (1, 0)
    assert _read(clips["large"], 2, named) == (2, 2)
    assert _read(clips["small"], 1, named) == (1, 0)  # already one: no reopen


def test_stats_show_each_streams_threads_against_the_plan(clips):
    with StreamLoader([clips["small"], clips["large"]], size=(64, 64)) as loader:
        planned = loader.plan.threads.ffmpeg
        batches = sum(1 for _ in loader)
        streams = loader.stats()["streams"]
    assert batches == 30
    if loader.plan.usable_cores >= 2:  # a file stream per core or fewer: two or more
        assert planned >= 2, loader.plan.reasons["threads"]
        assert "opens with 1" in loader.plan.reasons["threads"]
    assert [s["ffmpeg_threads"] for s in streams] == [1, planned]


def test_files_read_to_the_end_plan_two_threads_where_looping_ones_plan_one(clips):
    """Two large files on a budget of one core: read once to the end, each gets two
    frame threads (the one left when the other ends can use the freed core); looping,
    which never ends, one."""
    profile = Profile(thread_budget=1)
    large = clips["large"]
    with StreamLoader([large, large], size=(64, 64), profile=profile) as loader:
        ended = loader.plan
        batches = sum(1 for _ in loader)
        threads = [s["ffmpeg_threads"] for s in loader.stats()["streams"]]
    assert batches == 30
    assert ended.threads.ffmpeg == 2, ended.reasons["threads"]
    assert "read to its end" in ended.reasons["threads"]
    assert threads == [2, 2]
    looping = [VideoSource(large, loop=True), VideoSource(large, loop=True)]
    with StreamLoader(looping, size=(64, 64), profile=profile) as loader:
        assert loader.plan.threads.ffmpeg == 1, loader.plan.reasons["threads"]
        next(iter(loader))
        assert [s["ffmpeg_threads"] for s in loader.stats()["streams"]] == [1, 1]
