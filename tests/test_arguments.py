"""Every public argument is checked where it is given: ArgumentError naming it, the bad
value and what is allowed; the settings typed as ``Literal`` are accepted in any case."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from _media import clip, media_dir

import edgeload as el
from edgeload.errors import ArgumentError
from edgeload.pipeline import Prefetcher, SlotPool, WorkerPool
from edgeload.platform.plan import plan_for
from edgeload.platform.probe import probe
from edgeload.platform.profile import load_profile

NAN, INF = float("nan"), float("inf")
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "platforms"


@pytest.fixture()
def path(tmp_path):
    # The constructor checks a file exists; it opens nothing, so any bytes will do.
    target = tmp_path / "clip.mp4"
    target.write_bytes(b"not opened by the constructor")
    return str(target)


def _video_threads():
    return [t.name for t in threading.enumerate() if t.name.startswith("edgeload-video")]


def test_a_lone_string_is_refused_with_the_list_to_pass(path):
    with pytest.raises(ArgumentError, match=r"sources must be a list") as info:
        el.StreamLoader(path)
    assert f"StreamLoader([{path!r}])" in str(info.value)
    with pytest.raises(ArgumentError, match=r"StreamLoader\(\['clip.mp4'\]\)"):
        el.StreamLoader("clip.mp4")
    with pytest.raises(ArgumentError, match=r"sources must be a list .*got NoneType None"):
        el.StreamLoader(None)
    with pytest.raises(ArgumentError, match=r"StreamLoader\(\[0\]\)"):
        el.StreamLoader(0)
    assert _video_threads() == []


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"size": 0}, r"size must be >= 1, got 0"),
        ({"size": 640.0}, r"size must be a pair \(width, height\) of ints >= 1, got 640.0"),
        ({"size": ("640", "480")}, r"size must be .*got \('640', '480'\)"),
        ({"size": (640, 0)}, r"size must be .*got \(640, 0\)"),
        ({"size": (640.5, 480)}, r"size must be"),
        ({"size": (True, 480)}, r"size must be"),
        ({"batch": "4"}, r"batch must be an int >= 1 or None, got '4' \(str\)"),
        ({"batch": True}, r"batch must be an int >= 1 or None, got True"),
        ({"batch": 0}, r"batch must be >= 1 or None, got 0"),
        ({"timeout_s": -1}, r"timeout_s must be > 0, got -1"),
        ({"timeout_s": NAN}, r"timeout_s must be a finite number > 0, got nan"),
        ({"timeout_s": INF}, r"timeout_s must be a finite number > 0, got inf"),
        ({"deadline_ms": 0}, r"deadline_ms must be > 0 or None, got 0"),
        ({"deadline_ms": "100"}, r"deadline_ms must be a number"),
        ({"layout": "HWC"}, r"layout must be one of \('NHWC', 'NCHW'\), got 'HWC'"),
        ({"color": 3}, r"color must be one of"),
        ({"resize": "crop"}, r"resize must be one of"),
        ({"on_error": "ignore"}, r"on_error must be one of"),
        ({"policy": "newest"}, r"policy must be one of"),
        ({"memory_mode": "vram"}, r"memory_mode must be one of"),
        ({"profile": {"num_workers": 2}}, r"profile must be an edgeload Profile"),
    ],
)
def test_stream_loader_arguments_are_named(path, kw, match):
    with pytest.raises(ArgumentError, match=r"StreamLoader: " + match):
        el.StreamLoader([path], **kw)
    assert _video_threads() == []


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"backoff_s": (1,)}, r"backoff_s must be a pair \(first, cap\).*got \(1,\)"),
        ({"backoff_s": (5, 1)}, r"backoff_s must be .*0 < first <= cap"),
        ({"backoff_s": (NAN, 1)}, r"backoff_s\[0\] \(first\) must be a finite number"),
        ({"backoff_s": 2}, r"backoff_s must be a pair"),
        ({"open_timeout_s": INF}, r"open_timeout_s must be a finite number > 0, got inf"),
        ({"read_timeout_s": 0}, r"read_timeout_s must be > 0, got 0"),
        ({"stall_timeout_s": "5"}, r"stall_timeout_s must be a number"),
        ({"fps": NAN}, r"fps must be a finite number > 0 or None, got nan"),
        ({"max_retries": True}, r"max_retries must be an int >= 0 or None, got True"),
        ({"max_retries": -1}, r"max_retries must be >= 0 or None, got -1"),
        ({"backend": "vaapi"}, r"backend must be one of"),
        ({"rtsp_transport": "sctp"}, r"rtsp_transport must be one of"),
        ({"name": 7}, r"name must be a non-empty str or None, got 7"),
    ],
)
def test_video_source_arguments_are_named(kw, match):
    with pytest.raises(ArgumentError, match=match):
        el.VideoSource("rtsp://127.0.0.1:9/cam", **kw)


def test_file_flags_must_be_bools(path):
    with pytest.raises(ArgumentError, match=r"loop must be True or False, got 'no'"):
        el.VideoSource(path, loop="no")


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"batch_size": "4"}, r"batch_size must be an int >= 1 or None"),
        ({"batch_size": True}, r"batch_size must be an int"),
        ({"num_workers": True}, r"num_workers option should be non-negative; got True"),
        ({"num_workers": "many"}, r"num_workers must be one of \('auto',\)"),
        ({"timeout": NAN}, r"timeout must be a finite number >= 0, got nan"),
        ({"timeout": "1"}, r"timeout must be a number"),
        ({"worker_kind": "fiber"}, r"worker_kind must be one of"),
        ({"on_error": "ignore"}, r"on_error must be 'raise' or 'skip'"),
        ({"max_skips": True}, r"max_skips must be an int >= 0, got True"),
        ({"num_workers": 2, "prefetch_factor": 2.5}, r"prefetch_factor must be an int"),
        ({"prefetch_bytes": 0}, r"prefetch_bytes must be >= 1 or None, got 0"),
        ({"pin_memory": "yes"}, r"pin_memory must be True, False or 'auto'"),
        ({"memory_mode": "vram"}, r"memory_mode must be one of"),
    ],
)
def test_data_loader_arguments_are_named(kw, match):
    with pytest.raises(ArgumentError, match=match):
        el.DataLoader(list(range(10)), **kw)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"count": True}, r"count must be an int >= 1, got True"),
        ({"count": 2.0}, r"count must be an int"),
        ({"count": 2, "reserve": 3}, r"reserve must be between 0 and count=2, got 3"),
        ({"count": 2, "max_bytes": "1e9"}, r"max_bytes must be an int"),
        ({"count": 1, "shared": "yes"}, r"shared must be True or False"),
    ],
)
def test_slot_pool_arguments_are_named(kw, match):
    with pytest.raises(ArgumentError, match=match):
        SlotPool((2, 2), np.uint8, **kw)


def test_slot_pool_shape_and_dtype_are_named():
    with pytest.raises(ArgumentError, match=r"shape must be a tuple of ints, got \('2', 2\)"):
        SlotPool(("2", 2), count=1)
    with pytest.raises(ArgumentError, match=r"dtype 'pixels' is not a numpy dtype"):
        SlotPool((2, 2), "pixels", count=1)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"kind": "fiber"}, r"kind must be 'thread' or 'process', got 'fiber'"),
        ({"num_workers": True}, r"num_workers must be an int >= 1, got True"),
        ({"timeout_s": NAN}, r"timeout_s must be a finite number > 0 or None, got nan"),
        ({"timeout_s": -1}, r"timeout_s must be > 0 or None, got -1"),
        ({"threads_per_worker": 0}, r"threads_per_worker must be >= 1, got 0"),
        ({"seed": 1.5}, r"seed must be an int"),
    ],
)
def test_worker_pool_arguments_are_named(kw, match):
    with pytest.raises(ArgumentError, match=match):
        WorkerPool(abs, **kw)
    with pytest.raises(ArgumentError, match=r"fn and init_fn must be callable"):
        WorkerPool("abs")
    assert not [t for t in threading.enumerate() if t.name.startswith("edgeload-workers")]


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"max_items": "2"}, r"max_items must be an int >= 1"),
        ({"max_items": True}, r"max_items must be an int >= 1, got True"),
        ({"max_items": 2, "max_bytes": 0}, r"max_bytes must be >= 1 or None, got 0"),
        ({"max_items": 2, "policy": "newest"}, r"policy must be 'block' or 'latest'"),
        ({"max_items": 2, "on_drop": 3}, r"on_drop must be callable or None, got 3"),
    ],
)
def test_prefetcher_arguments_are_named(kw, match):
    with pytest.raises(ArgumentError, match=match):
        Prefetcher(**kw)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"streams": 0}, r"plan_for: streams must be >= 1 or None, got 0"),
        ({"streams": 2, "frame": 640}, r"plan_for: frame must be a pair"),
        ({"item_bytes": "100"}, r"plan_for: item_bytes must be an int"),
        ({"streams": 2, "batch": True}, r"plan_for: batch must be an int"),
        ({"streams": 2, "live": "yes"}, r"plan_for: live must be True or False"),
        ({"streams": 2, "prefetch_bytes": 1.5}, r"plan_for: prefetch_bytes must be an int"),
        ({"streams": 2, "profile": "rpi4"}, r"plan_for: profile must be a Profile"),
        ({"streams": 2, "num_workers": 0}, r"arguments: num_workers must be 1..256"),
        ({"streams": 2, "thread_budget": True}, r"arguments: thread_budget must be"),
        ({"streams": 2, "workers": 2}, r"arguments: unknown key 'workers'"),
    ],
)
def test_plan_for_arguments_are_named(kw, match):
    platform = probe(FIXTURES / "rpi4")
    with pytest.raises(ArgumentError, match=match):
        plan_for(platform=platform, **kw)


def test_plan_for_checks_overrides_on_a_given_profile_too():
    platform = probe(FIXTURES / "rpi4")
    profile = load_profile(platform, tuned=None)
    with pytest.raises(ArgumentError, match=r"arguments: worker_kind must be one of"):
        plan_for(streams=2, platform=platform, profile=profile, worker_kind="green")
    plan = plan_for(item_bytes=100, platform=platform, profile=profile, worker_kind="PROCESS")
    assert plan.worker_kind == "process"


def test_load_profile_overrides_are_arguments_in_any_case():
    platform = probe(FIXTURES / "rpi4")
    with pytest.raises(ArgumentError, match=r"arguments: num_workers must be 1..256"):
        load_profile(platform, tuned=None, num_workers=True)
    profile = load_profile(platform, tuned=None, worker_kind="Thread", memory_mode="HOST")
    assert (profile.worker_kind, profile.memory_mode) == ("thread", "host")


# One rule for the Literal settings: any case, normalised once, in every constructor.


def test_literal_settings_are_accepted_in_any_case(path):
    source = el.VideoSource("rtsp://127.0.0.1:9/cam", policy="Every", backend="FFMPEG",
                            rtsp_transport="UDP")  # fmt: skip
    assert (source.policy, source.backend, source.rtsp_transport) == ("every", "ffmpeg", "udp")
    with el.StreamLoader([path], layout="nchw", color="RGB", resize="LetterBox",
                         on_error="RAISE", policy="Latest", memory_mode="Host") as loader:  # fmt: skip
        assert loader.stats()["memory_mode"] == "host"
    loader = el.DataLoader(list(range(4)), num_workers=1, worker_kind="THREAD", on_error="Skip",
                           memory_mode="HOST")  # fmt: skip
    assert loader.stats()["worker_kind"] == "thread"
    loader.close()
    with Prefetcher(max_items=1, policy="LATEST") as queue:
        assert queue.policy == "latest"
    with WorkerPool(abs, kind="Thread") as pool:
        assert pool.kind == "thread"


def test_lower_case_layout_gives_the_layout_it_names(tmp_path_factory):
    video = clip(media_dir(tmp_path_factory), size=(160, 120), fps=30, seconds=0.3)
    with el.StreamLoader([video], size=(80, 60), layout="nchw", color="RGB") as loader:
        batch = next(iter(loader))
    assert tuple(batch.frames.shape) == (1, 3, 60, 80)
