"""StreamLoader with real clips: batches, layouts, resize modes, failures, resume, memory."""

from __future__ import annotations

import re
import subprocess
import threading
import time
import tracemalloc

import cv2
import numpy as np
import pytest
from _media import FFMPEG, clip, ffmpeg_frames, media_dir, truncated_copy
from _servers import SilentServer

from edgeload.errors import ClosedError, SourceError, StateError
from edgeload.video import StreamLoader, VideoSource


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    root = media_dir(tmp_path_factory)
    return {
        "small": clip(root, size=(160, 120), fps=30, seconds=1.0),
        "wide": clip(root, size=(320, 180), fps=30, seconds=1.0, pattern="testsrc"),
        "long": clip(root, size=(160, 120), fps=30, seconds=3.0),
        "root": root,
    }


def _edgeload_threads():
    return [t.name for t in threading.enumerate() if t.name.startswith("edgeload-video")]


def test_files_deliver_every_frame_in_order_resized(media):
    expected = ffmpeg_frames(media["small"], (64, 48))
    with StreamLoader([media["small"], media["wide"]], size=(64, 48)) as loader:
        batches = list(loader)
        stats = loader.stats()
    assert len(batches) == 30
    for i, batch in enumerate(batches):
        assert tuple(batch.frames.shape) == (2, 48, 64, 3)
        assert batch.valid.tolist() == [True, True]
        assert [(m.stream_id, m.seq, m.dropped) for m in batch.meta] == [(0, i, 0), (1, i, 0)]
        assert np.array_equal(batch.frames[0].numpy(), expected[i])
    assert [s["state"] for s in stats["streams"]] == ["ended", "ended"]
    assert stats["streams"][0]["pipeline"] == str(media["small"])
    assert stats["memory_mode"] == "host"
    assert "no device=" in stats["memory_mode_reason"]
    assert _edgeload_threads() == []


def test_nchw_rgb_letterbox(media):
    with StreamLoader([media["wide"]], size=(64, 64), layout="NCHW", color="rgb",
                      resize="letterbox") as loader:  # fmt: skip
        first = next(iter(loader))
    frames = first.frames.numpy()
    assert frames.shape == (1, 3, 64, 64)
    # 320x180 into 64x64 keeps 16:9: a 64x36 picture, 14 grey rows above and below.
    assert (frames[0, :, :14] == 114).all() and (frames[0, :, 50:] == 114).all()
    bgr = cv2.resize(ffmpeg_frames(media["wide"], (320, 180))[0], (64, 36))
    assert np.array_equal(frames[0, :, 14:50].transpose(1, 2, 0), bgr[..., ::-1])


def test_fps_limit_and_fixed_batch(media):
    src = VideoSource(media["small"], fps=10)
    with StreamLoader([src, media["small"]], size=(32, 32), batch=4) as loader:
        batches = list(loader)
        stats = loader.stats()
    seqs = {0: [], 1: []}
    for batch in batches:
        assert tuple(batch.frames.shape) == (4, 32, 32, 3)
        for meta in batch.meta:
            if meta is not None:
                seqs[meta.stream_id].append(meta.seq)
    assert seqs[0] == list(range(0, 30, 3)) and seqs[1] == list(range(30))
    assert stats["streams"][0]["skipped"] == 20
    assert stats["streams"][0]["drops"] == 18  # the consumer sees the gaps as drops


def test_truncated_file_ends_its_stream_with_error_others_continue(media, caplog):
    broken = truncated_copy(media["long"], media["root"], fraction=0.4)
    with StreamLoader([broken, media["small"]], size=(32, 32)) as loader:
        batches = list(loader)
        stats = loader.stats()
    bad, good = stats["streams"]
    assert bad["state"] == "failed"
    assert "truncated or corrupt" in bad["last_error"] and str(broken) in bad["last_error"]
    assert good["state"] == "ended" and good["delivered"] == 30
    assert sum(bool(b.valid[1]) for b in batches) == 30
    assert "truncated or corrupt" in caplog.text


def test_corrupt_file_raises_with_on_error_raise(media, tmp_path):
    garbage = tmp_path / "garbage.mp4"
    garbage.write_bytes(b"\x00not a video\x00" * 4096)
    loader = StreamLoader([garbage, media["small"]], size=(32, 32), on_error="raise")
    with loader, pytest.raises(SourceError, match=r"stream 0 .*garbage.mp4.*could not open") as err:
        for _ in loader:
            pass
    assert err.value.__cause__ is None  # OpenCV returned nothing: there is no exception to chain
    assert _edgeload_threads() == []


def test_bad_source_is_refused_before_any_thread_starts(media):
    with pytest.raises(SourceError, match=r"'nope.mp4' does not exist"):
        StreamLoader([media["small"], "nope.mp4"])
    with pytest.raises(ValueError, match=r"layout must be one of \('NHWC', 'NCHW'\)"):
        StreamLoader([media["small"]], layout="HWC")
    assert _edgeload_threads() == []


@pytest.fixture(scope="module")
def uninterrupted(media):
    with StreamLoader([media["small"], media["wide"]], size=(48, 48)) as loader:
        return [b.frames.numpy().copy() for b in loader]


@pytest.mark.parametrize("k", [0, 1, 12, 29, 30])
def test_resume_at_any_step_yields_the_tail_of_an_uninterrupted_run(media, uninterrupted, k):
    sources = [media["small"], media["wide"]]
    with StreamLoader(sources, size=(48, 48)) as loader:
        for _ in range(k):
            next(loader)
        state = loader.state_dict()
    assert state == {
        "version": 1,
        "loader": "StreamLoader",
        "streams": [{"uri": str(p), "frame": k} for p in sources],
    }
    resumed = StreamLoader(sources, size=(48, 48))
    resumed.load_state_dict(state)
    with resumed:
        tail = list(resumed)
    assert [b.meta[0].seq for b in tail] == list(range(k, 30))
    assert len(tail) == len(uninterrupted[k:])
    assert all(np.array_equal(a, b.frames.numpy()) for a, b in zip(uninterrupted[k:], tail))


def test_load_state_dict_refuses_other_sources_and_late_calls(media):
    other = {"version": 1, "streams": [{"uri": "/elsewhere.mp4", "frame": 3}]}
    with StreamLoader([media["small"]], size=(32, 32)) as loader:
        with pytest.raises(ValueError, match="give the same file sources in the same order"):
            loader.load_state_dict(other)
        with pytest.raises(ValueError, match="version 7 is not 1"):
            loader.load_state_dict({"version": 7, "streams": []})
        next(loader)
        with pytest.raises(ValueError, match="must come before iteration starts"):
            loader.load_state_dict(loader.state_dict())


@pytest.mark.parametrize(
    ("frame", "says"),
    [
        (
            10**9,
            r"streams\[0\]\.frame of {uri} is 1000000000, past the end of the file "
            r"\(it has 30 frames\)",
        ),
        (-5, r"streams\[0\]\.frame of {uri} must be a frame index >= 0, got -5"),
        ("3", r"streams\[0\]\.frame of {uri} must be a frame index >= 0, got '3'"),
        (None, r"streams\[0\]\.frame of {uri} must be a frame index >= 0, got None"),
    ],
)
def test_a_resume_frame_outside_the_file_is_refused_when_loaded(media, frame, says):
    state = {"version": 1, "loader": "StreamLoader",
             "streams": [{"uri": str(media["small"]), "frame": frame}]}  # fmt: skip
    says = says.format(uri=re.escape(repr(str(media["small"]))))
    with StreamLoader([media["small"]], size=(32, 32)) as loader:
        with pytest.raises(StateError, match=says) as info:
            loader.load_state_dict(state)
        assert "load_state_dict()" in str(info.value)  # what to do
        # Nothing changed: the file plays from its start.
        assert [b.meta[0].seq for b in loader] == list(range(30))


def test_a_file_without_a_frame_count_is_checked_by_reading_to_the_frame(media, tmp_path):
    # A raw H.264 stream has no header count (OpenCV reports a negative one).
    raw = tmp_path / "small.h264"
    subprocess.run([FFMPEG, "-loglevel", "error", "-y", "-i", str(media["small"]), "-c", "copy",
                    "-f", "h264", str(raw)], check=True, timeout=60)  # fmt: skip
    for frame, seqs in ((20, list(range(20, 30))), (30, [])):
        with StreamLoader([raw], size=(32, 32)) as loader:
            loader.load_state_dict({"version": 1, "streams": [{"uri": str(raw), "frame": frame}]})
            assert [b.meta[0].seq for b in loader] == seqs
    with StreamLoader([raw], size=(32, 32)) as loader, pytest.raises(
        StateError, match=r"is 31, past the end of the file \(it has fewer than 31 frames\)"
    ):
        loader.load_state_dict({"version": 1, "streams": [{"uri": str(raw), "frame": 31}]})


def test_a_looping_files_frame_runs_on_across_loops(media):
    state = {
        "version": 1,
        "streams": [{"uri": str(media["small"]), "frame": 45}],
    }  # saved before "loader"
    with StreamLoader([VideoSource(media["small"], loop=True)], size=(32, 32)) as loader:
        loader.load_state_dict(state)
        assert next(loader).meta[0].seq == 45


@pytest.mark.parametrize(
    "state",
    [
        {"version": 1, "loader": "DataLoader", "epoch": 0, "num_workers": 0},
        {"version": 1, "epoch": 0, "num_workers": 0},  # saved before "loader"
        {"version": 1, "loader": "StreamLoader", "streams": "small.mp4"},
        [],
    ],
)
def test_what_is_no_streamloader_state_is_refused(media, state):
    with StreamLoader([media["small"]], size=(32, 32)) as loader, pytest.raises(
        StateError, match=r"StreamLoader"
    ):
        loader.load_state_dict(state)


def test_batch_memory_is_reused_and_steady_state_allocates_no_frames(media):
    src = VideoSource(media["wide"], loop=True)  # 320x180: 172 KB per decoded frame
    with StreamLoader([src, src], size=(320, 320)) as loader:
        it = iter(loader)
        for _ in range(10):  # warm up: slots, decode buffers, caches
            next(it)
        slot_bytes = loader.stats()["slot_bytes"]
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            addresses = set()
            for _ in range(60):
                batch = next(it)
                addresses.add(batch.frames.data_ptr())
                del batch
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        after = loader.stats()
    # numpy reports its buffers to tracemalloc: one frame-sized array made (even if
    # freed at once) in any thread during these 120 frames would raise the peak by 172 KB.
    assert peak - base < 64 * 1024, peak - base
    # The pool's own slots, reused: it never grew, never copied, and every batch was one
    # of them (which of them, and how many in turn, depends on the box's timing).
    assert after["slot_bytes"] == slot_bytes and after["slot_copies"] == 0
    assert len(addresses) <= slot_bytes // (2 * 320 * 320 * 3)


def test_kept_batches_are_never_overwritten(media):
    with StreamLoader([media["small"]], size=(32, 32)) as loader:
        kept = [(b.frames, b.frames.numpy().copy()) for b in loader]
    assert len(kept) == 30
    assert all(np.array_equal(t.numpy(), snap) for t, snap in kept)


def test_a_camera_whose_open_hangs_does_not_stop_the_others(media):
    with SilentServer() as camera:
        hanging = VideoSource(f"rtsp://127.0.0.1:{camera.port}/cam", open_timeout_s=2.0,
                              backoff_s=(0.1, 0.2))  # fmt: skip
        replay = VideoSource(media["small"], realtime=True, loop=True)
        with StreamLoader([hanging, replay], size=(32, 32), deadline_ms=100) as loader:
            start = time.monotonic()
            got = []
            for batch in loader:
                assert batch.valid.tolist() == [False, True]  # ships on the deadline
                got.append(time.monotonic() - start)
                if got[-1] > 5.0:
                    break
            stats = loader.stats()
            closing = time.monotonic()
        assert time.monotonic() - closing < 20.0  # a hang would be the join timeout
    cam, file = stats["streams"]
    assert file["state"] == "streaming" and file["reconnects"] == 0
    assert camera.held, "the camera did connect to the silent server"
    assert cam["state"] in ("connecting", "reconnecting") and cam["attempts"] >= 2
    assert "open timeout" in cam["last_error"]
    assert got[0] < 10.0  # the file delivered while the camera could not open (valid above)
    gaps = np.diff(got)
    # Batches ship every 100 ms; a loader that waited for the camera would show a gap
    # of its 2 s open timeout. 1 s is 10x the expected gap and still tells them apart.
    assert len(got) > 25 and gaps.max() < 1.0, gaps.max()
    assert _edgeload_threads() == []


def test_live_latest_keeps_frames_fresh_under_a_slow_consumer(media):
    src = VideoSource(media["long"], realtime=True, loop=True)
    with StreamLoader([src, src], size=(32, 32)) as loader:
        ages = []
        for i, batch in enumerate(loader):
            time.sleep(0.1)  # the model takes 100 ms per batch
            if i >= 3:
                ages += [m.age_ms for m in batch.meta if m is not None]
            if i == 15:
                break
        stats = loader.stats()
    # ~30-100 ms expected; a queue instead of the latest frame grows by 200 ms/s.
    assert max(ages) < 1000, ages
    assert stats["drops"] > 20  # 30 fps in, 10 batches/s out: the rest are counted drops


def test_add_and_remove_while_running(media):
    src = VideoSource(media["small"], realtime=True, loop=True)
    with StreamLoader([src], size=(32, 32)) as loader:
        it = iter(loader)
        assert tuple(next(it).frames.shape) == (1, 32, 32, 3)
        sid = loader.add(VideoSource(media["wide"], realtime=True, loop=True))
        for _ in range(30):
            batch = next(it)
            if batch.frames.shape[0] == 2 and all(batch.valid.tolist()):
                break
        assert {m.stream_id for m in batch.meta if m} == {0, sid}
        loader.remove(0)
        assert not any(t.name == "edgeload-video-0" for t in threading.enumerate())
        for _ in range(30):
            batch = next(it)
            if batch.frames.shape[0] == 1:
                break
        assert [m.stream_id for m in batch.meta if m] == [sid]
    with pytest.raises(ClosedError, match="after close"):
        loader.add(media["small"])
    assert _edgeload_threads() == []
