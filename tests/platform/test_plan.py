"""The plan: numbers and reasons per board, fallbacks, and overrides."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from edgeload.errors import ArgumentError, PlatformError
from edgeload.platform.plan import plan_for, slot_count, tasks_in_flight
from edgeload.platform.probe import probe

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "platforms"


@pytest.mark.parametrize(
    ("board", "mode"),
    [
        ("jetson-agx-orin", "mapped"),
        ("jetson-orin-nano", "mapped"),
        ("jetson-xavier-nx", "mapped"),
        ("jetson-nano", "managed"),
        ("jetson-tx2", "managed"),
        ("rpi4", "host"),
        ("rpi-zero-2w", "host"),
        ("x86-desktop", "host"),
    ],
)
def test_memory_mode_per_board(board, mode):
    plan = plan_for(streams=4, frame=(640, 640), platform=probe(FIXTURES / board))
    assert plan.memory_mode == mode
    assert plan.reasons["memory_mode"]


@pytest.mark.parametrize(
    "board", ["jetson-agx-orin", "jetson-nano", "rpi4", "rpi-zero-2w", "x86-desktop"]
)
@pytest.mark.parametrize("streams", [1, 2, 4, 16])
def test_video_threads_fit_the_usable_cores(board, streams):
    platform = probe(FIXTURES / board)
    plan = plan_for(streams=streams, frame=(640, 640), platform=platform)
    usable = platform.cpu.usable_count
    assert plan.usable_cores == usable
    assert plan.worker_kind == "thread"
    assert plan.num_workers == streams
    assert plan.threads.ffmpeg >= 1
    if streams < usable:
        assert streams * plan.threads.ffmpeg + plan.threads.torch <= usable
    else:  # more streams than cores: one FFmpeg thread each, never more
        assert plan.threads.ffmpeg == 1


def test_prefetch_budget_and_slots_follow_the_profile():
    platform = probe(FIXTURES / "jetson-orin-nano")
    plan = plan_for(streams=4, frame=(640, 640), platform=platform)
    # 6% of 6245596 kB available, inside [16 MiB, 1 GiB]
    assert plan.prefetch_bytes == int(6245596 * 1024 * 0.06)
    assert plan.slot_bytes == 4 * 640 * 640 * 3
    assert 2 <= plan.slot_count <= 2 * 4 + 2
    assert plan.slot_count * plan.slot_bytes <= plan.prefetch_bytes
    small = plan_for(streams=4, frame=(640, 640), platform=platform, prefetch_bytes=1 << 20)
    assert small.prefetch_bytes == 1 << 20
    assert small.slot_count == 2
    assert "minimum" in small.reasons["prefetch"]


@pytest.mark.parametrize(
    ("streams", "batch", "slots"),
    [(1, None, 4), (2, None, 6), (4, None, 10), (32, None, 10), (32, 8, 10), (32, 2, 34)],
)
def test_video_slots_hold_two_frames_per_stream_counted_in_batches(streams, batch, slots):
    # Two frames per stream in batches (2 x streams / batch), at least 8 batches (2 per
    # stream below 4 streams), plus the two every loader has.  A batch slot per frame,
    # as before, grew with streams squared: 66 slots of 32 frames at 32 streams.
    platform = probe(FIXTURES / "jetson-agx-orin")
    plan = plan_for(streams=streams, frame=(160, 160), batch=batch, platform=platform)
    assert plan.slot_count * plan.slot_bytes <= plan.prefetch_bytes  # not the budget's cap
    assert plan.slot_count == slots
    assert plan.slot_bytes == (batch or streams) * 160 * 160 * 3


def test_nano_profile_caps_the_budget_and_leaves_a_core():
    platform = probe(FIXTURES / "jetson-nano")
    plan = plan_for(item_bytes=224 * 224 * 3, batch=32, platform=platform)
    assert plan.num_workers == platform.cpu.usable_count - 1
    assert plan.prefetch_bytes <= 128 << 20
    assert plan.profile_source.endswith("platforms/jetson-t210.toml")


def test_dataset_prefers_threads_unless_gil_bound():
    platform = probe(FIXTURES / "jetson-agx-orin")
    assert plan_for(item_bytes=1000, batch=8, platform=platform).worker_kind == "thread"
    x86 = probe(FIXTURES / "x86-desktop")
    gil = plan_for(item_bytes=1000, batch=8, platform=x86, gil_bound=True)
    assert gil.worker_kind == "process"
    assert "GIL-bound" in gil.reasons["workers"]


def test_small_dev_shm_means_threads_with_the_reason():
    x86 = probe(FIXTURES / "x86-desktop")
    tiny = dataclasses.replace(x86, memory=dataclasses.replace(x86.memory, shm_bytes=1 << 20))
    plan = plan_for(item_bytes=1 << 20, batch=8, platform=tiny, gil_bound=True)
    assert plan.worker_kind == "thread"
    assert "--shm-size" in plan.reasons["workers"]


def test_jetson_without_usable_cuda_falls_back_to_host_with_reason():
    orin = probe(FIXTURES / "jetson-agx-orin")
    broken = dataclasses.replace(orin, gpu=dataclasses.replace(orin.gpu, cuda_usable=False))
    plan = plan_for(streams=2, platform=broken)
    assert plan.memory_mode == "host"
    assert "falling back to host" in plan.reasons["memory_mode"]
    with pytest.raises(
        PlatformError, match=r"memory_mode='mapped' needs a usable CUDA device.*'host'"
    ):
        plan_for(streams=2, platform=broken, memory_mode="mapped")


def test_this_machine_without_cuda():
    live = probe()
    if live.gpu.cuda_usable:
        pytest.skip("this machine has CUDA")
    assert plan_for(streams=2).memory_mode == "host"
    with pytest.raises(PlatformError, match="memory_mode='pinned' needs a usable CUDA device"):
        plan_for(streams=2, memory_mode="pinned")


def test_overrides_win_and_bad_ones_are_named():
    platform = probe(FIXTURES / "rpi4")
    plan = plan_for(item_bytes=100, platform=platform, worker_kind="process", num_workers=3)
    assert (plan.worker_kind, plan.num_workers) == ("process", 3)
    assert plan.reasons["workers"] == "set by arguments"
    assert plan.profile_source.endswith("< arguments")
    with pytest.raises(ArgumentError, match="num_workers must be"):
        plan_for(item_bytes=100, platform=platform, num_workers=-1)
    with pytest.raises(ValueError, match="prefetch_bytes must be >= 0"):
        plan_for(item_bytes=100, platform=platform, prefetch_bytes=-5)


def test_plan_is_printable_and_serialisable():
    plan = plan_for(streams=4, frame=(1280, 720), platform=probe(FIXTURES / "jetson-agx-orin"))
    text = plan.describe()
    for word in ("workers", "memory mode", "prefetch", "threads", "decode", "profile"):
        assert word in text
    data = json.loads(json.dumps(plan.to_dict()))
    assert data["memory_mode"] == "mapped"
    assert set(data["reasons"]) >= {"workers", "memory_mode", "prefetch", "threads", "decode"}


def test_files_get_two_ffmpeg_frame_threads_live_streams_one():
    platform = probe(FIXTURES / "rpi4")  # 4 cores, 4 streams: one thread each when live
    live = plan_for(streams=4, platform=platform, live=True)
    files = plan_for(streams=4, platform=platform, live=False)
    assert live.threads.ffmpeg == 1
    assert "delays a live stream" in live.reasons["threads"]
    assert files.threads.ffmpeg == 2
    assert "raised to 2 for files" in files.reasons["threads"]
    one = plan_for(streams=1, platform=platform, live=False)  # 3 spare cores: the rule's 3
    assert one.threads.ffmpeg == 3


@pytest.mark.parametrize(
    ("board", "cores", "streams", "threads"),
    [
        ("rpi4", 4, 4, 2),  # a stream per core: the second frame thread stays
        ("rpi4", 4, 5, 1),  # beyond: the streams keep the cores busy
        ("jetson-agx-orin", 12, 12, 2),
        ("jetson-agx-orin", 12, 24, 1),
        ("jetson-agx-orin", 12, 32, 1),  # what an AGX Orin runs
    ],
)
def test_many_file_streams_get_one_ffmpeg_thread(board, cores, streams, threads):
    platform = probe(FIXTURES / board)
    assert platform.cpu.usable_count == cores
    files = plan_for(streams=streams, platform=platform, live=False)
    assert files.threads.ffmpeg == threads
    if threads == 1:
        assert "1 stream(s) per core keep every core busy" in files.reasons["threads"]
    else:
        assert "raised to 2 for files" in files.reasons["threads"]
    assert plan_for(streams=streams, platform=platform, live=True).threads.ffmpeg == 1


@pytest.mark.parametrize(
    ("board", "streams", "finite", "looping"),
    [
        ("rpi4", 4, 2, 2),  # a stream per core: two either way
        ("rpi4", 8, 2, 1),  # files read to the end keep two up to 2 per core
        ("rpi4", 9, 1, 1),
        ("jetson-agx-orin", 24, 2, 1),
        ("jetson-agx-orin", 32, 1, 1),
    ],
)
def test_files_read_to_the_end_keep_two_frame_threads_up_to_two_per_core(
    board, streams, finite, looping
):
    platform = probe(FIXTURES / board)
    ended = plan_for(streams=streams, platform=platform, live=False, finite=True)
    looped = plan_for(streams=streams, platform=platform, live=False)
    assert (ended.threads.ffmpeg, looped.threads.ffmpeg) == (finite, looping)
    if finite == 2 and looping == 1:
        assert "read to its end" in ended.reasons["threads"]
    if finite == 1:
        assert "more than 2 stream(s) per core" in ended.reasons["threads"]
    # finite says nothing about live streams: one thread each, as before
    assert plan_for(streams=streams, platform=platform, live=True, finite=True).threads.ffmpeg == 1


@pytest.mark.parametrize("in_flight", [0, 1, 4, 8])
@pytest.mark.parametrize("budget_slots", [None, 1, 3, 5, 20])
def test_slot_count_is_in_flight_plus_two_within_the_budget(in_flight, budget_slots):
    slot_bytes = 1000
    budget = None if budget_slots is None else budget_slots * slot_bytes + 999
    count = slot_count(in_flight, slot_bytes, budget)
    assert count >= 2  # the batch the consumer holds, and the one handed over
    assert count <= max(2, in_flight + 2)
    if budget is not None and count > 2:
        assert count * slot_bytes <= budget
    if budget is None or budget_slots >= in_flight + 2:
        assert count == in_flight + 2


@pytest.mark.parametrize("kind", ["thread", "process"])
def test_a_datasets_slots_follow_the_loaders_tasks_in_flight(kind):
    platform = probe(FIXTURES / "x86-desktop")
    plan = plan_for(
        item_bytes=224 * 224 * 3, batch=32, platform=platform, worker_kind=kind, num_workers=2
    )
    assert plan.worker_kind == kind
    assert tasks_in_flight(2, None) == 4  # torch's prefetch_factor=2 per worker
    assert plan.slot_count == slot_count(4, plan.slot_bytes, plan.prefetch_bytes) == 6
    # An explicit prefetch_factor wins (at least 1); 0 workers keep nothing in flight.
    assert tasks_in_flight(2, 3) == 6
    assert tasks_in_flight(2, 0) == 2
    assert tasks_in_flight(0, None) == 0


def test_decode_budget_exceeded_on_agx_orin_says_by_how_much_and_what_helps():
    platform = probe(FIXTURES / "jetson-agx-orin")
    plan = plan_for(streams=32, frame=(1920, 1080), platform=platform)
    (note,) = [n for n in plan.notes if "decode budget" in n]
    assert "32.0 1080p30-equivalents" in note
    assert "about 22" in note and "10.0 over" in note
    assert "substream" in note and "key-frames" in note and "frame rate" in note
    assert note in plan.describe()


@pytest.mark.parametrize(
    ("board", "streams", "size", "fps", "over"),
    [
        ("jetson-agx-orin", 22, (1920, 1080), None, None),
        ("jetson-orin-nano", 12, (1920, 1080), None, "1.0 over"),
        ("jetson-orin-nano", 6, (1920, 1080), 60, "1.0 over"),
        ("jetson-orin-nano", 32, (640, 360), None, None),
        ("jetson-xavier-nx", 33, (1920, 1080), 30, "1.0 over"),
        ("jetson-nano", 3, (3840, 2160), 30, "4.0 over"),
    ],
)
def test_decode_budget_in_1080p30_equivalents(board, streams, size, fps, over):
    plan = plan_for(
        streams=streams,
        frame=(640, 640),
        source_size=size,
        source_fps=fps,
        platform=probe(FIXTURES / board),
    )
    notes = [n for n in plan.notes if "decode budget" in n]
    if over is None:
        assert notes == []
    else:
        assert len(notes) == 1 and over in notes[0]


@pytest.mark.parametrize("board", ["x86-desktop", "jetson-agx-orin-container", "rpi-zero-2w"])
def test_unknown_decode_budget_says_nothing(board):
    plan = plan_for(streams=64, frame=(1920, 1080), platform=probe(FIXTURES / board))
    assert not any("decode budget" in n for n in plan.notes)


@pytest.mark.parametrize(
    ("name", "value"), [("source_size", (0, 10)), ("source_fps", 0), ("source_fps", "30")]
)
def test_decode_budget_arguments_are_checked(name, value):
    with pytest.raises(ArgumentError, match=name):
        plan_for(streams=1, platform=probe(FIXTURES / "x86-desktop"), **{name: value})


def _with_opencv(board: str, **facts: object) -> object:
    """The board's tree as if probed live, with a cv2 of these build facts."""
    from edgeload.platform.facts import OpenCVInfo

    opencv = OpenCVInfo(**{"version": "4.10.0", "path": "/venv/cv2/cv2.so", "ffmpeg": True,
                           "gstreamer": False, "cuda": False, "shadows_system": False,
                           "system_path": None, **facts})  # fmt: skip
    return dataclasses.replace(probe(FIXTURES / board), live=True, opencv=opencv)


@pytest.mark.parametrize(
    ("board", "facts", "fix"),
    [
        ("rpi4", {}, "sudo apt install python3-opencv gstreamer1.0-libcamera"),
        ("jetson-orin-nano", {}, "the OpenCV JetPack installs"),
        (
            "jetson-orin-nano",
            {"shadows_system": True, "system_path": "/usr/lib/python3/dist-packages/cv2"},
            "pip's OpenCV (/venv/cv2/cv2.so) hides the board's "
            "(/usr/lib/python3/dist-packages/cv2): pip uninstall opencv-python",
        ),
    ],
)
def test_a_board_whose_opencv_lacks_gstreamer_is_told_how_to_get_it(board, facts, fix):
    plan = plan_for(streams=2, platform=_with_opencv(board, **facts))
    assert plan.decode_backend == "ffmpeg"
    assert "this OpenCV has no GStreamer: FFmpeg, software decode; " in plan.reasons["decode"]
    assert fix in plan.reasons["decode"]
