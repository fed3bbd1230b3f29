"""Model-ready batches: ``dtype``, ``mean`` and ``std`` on the CPU and on a device (the
host engine), and ``Batch.to``; each checked against the uint8 frames of the same file."""

from __future__ import annotations

import collections
import contextlib

import numpy as np
import pytest
import torch
from _media import clip, media_dir
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgeload.cuda.host_engine import HostEngine
from edgeload.errors import ArgumentError
from edgeload.video import StreamLoader

_SIZE = (64, 48)
_MEAN, _STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
_GPU_SETTINGS = settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def video(tmp_path_factory):
    """A clip, and its uint8 NCHW RGB letterboxed frames by seq."""
    path = clip(media_dir(tmp_path_factory), size=(160, 120), fps=30, seconds=1.0)
    with StreamLoader([path], size=_SIZE, policy="every", layout="NCHW", color="rgb",
                      resize="letterbox") as loader:  # fmt: skip
        reference = {b.meta[0].seq: b.frames[0].clone() for b in loader}
    return path, reference


def _loader(path, **kwargs):
    return StreamLoader([path], size=_SIZE, policy="every", layout="NCHW", color="rgb",
                        resize="letterbox", **kwargs)  # fmt: skip


def _normalised(frame_u8, mean, std):
    out = frame_u8.float() / 255
    if mean is not None:
        out = (out - torch.tensor(mean).view(3, 1, 1)) / torch.tensor(std).view(3, 1, 1)
    return out


@pytest.mark.parametrize(
    ("dtype", "mean", "std", "atol"),
    [
        (torch.float32, None, None, 1e-6),
        (torch.float32, _MEAN, _STD, 1e-5),
        (torch.float16, None, None, 1e-3),
        (torch.float16, _MEAN, _STD, 2e-2),
        (torch.float32, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 1e-5),
    ],
)
def test_float_batches_are_the_uint8_frames_scaled_and_normalised(video, dtype, mean, std, atol):
    path, reference = video
    with _loader(path, dtype=dtype, mean=mean, std=std) as loader:
        batches = list(loader)  # every batch kept: none may be overwritten by a later one
        stats = loader.stats()
    assert [b.meta[0].seq for b in batches] == sorted(reference)
    for batch in batches:
        assert batch.frames.dtype == dtype
        assert batch.frames.shape == (1, 3, _SIZE[1], _SIZE[0])
        want = _normalised(reference[batch.meta[0].seq], mean, std)
        assert torch.allclose(batch.frames[0].float(), want, atol=atol)
    if mean is None:
        assert float(batches[0].frames.min()) >= 0.0
        assert float(batches[0].frames.max()) <= 1.0
    itemsize = 2 if dtype == torch.float16 else 4
    assert stats["output_dtype"] == str(dtype).replace("torch.", "")
    assert stats["output_batch_bytes"] == 3 * _SIZE[0] * _SIZE[1] * itemsize
    assert "output" in stats["plan"]


def test_a_float_batch_goes_into_a_conv_net_as_it_is(video):
    path, _ = video
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU())
    with _loader(path, dtype=torch.float32, mean=_MEAN, std=_STD) as loader:
        batch = next(iter(loader))
        with torch.no_grad():
            out = net(batch.frames)
    assert out.shape == (1, 8, _SIZE[1], _SIZE[0])


def test_a_plain_loop_reuses_its_float_outputs(video):
    path, reference = video
    with _loader(path, dtype=torch.float32) as loader:
        count = 0
        for batch in loader:
            assert torch.allclose(batch.frames[0], _normalised(reference[batch.meta[0].seq],
                                                                None, None))  # fmt: skip
            count += 1
        stats = loader.stats()
    assert count == len(reference)
    assert 1 <= stats["outputs_made"] <= 3, stats  # kept and reused, not one per batch


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (
            {"dtype": torch.int32},
            r"one of torch.uint8, torch.float16, torch.float32, got torch.int32",
        ),
        ({"dtype": "float32"}, r"dtype must be one of .* got 'float32'"),
        ({"dtype": np.float32}, r"dtype must be one of .* got <class 'numpy.float32'>"),
        ({"dtype": torch.float32, "mean": (0.5, 0.5)}, r"mean must be 3 numbers.*\(0.5, 0.5\)"),
        ({"dtype": torch.float32, "std": (0.2, 0.0, 0.2)}, r"std must have no zero.*0.0"),
        ({"dtype": torch.float32, "std": "abc"}, r"std must be 3 numbers.*'abc'"),
        ({"mean": _MEAN}, r"mean=.* needs a float dtype"),
    ],
)
def test_bad_output_arguments_name_the_value_and_what_is_allowed(video, kwargs, match):
    with pytest.raises(ArgumentError, match=match):
        _loader(video[0], **kwargs)


@pytest.mark.parametrize("mode", ["mapped", "managed"])
def test_a_float_dtype_on_mapped_slots_without_a_device_says_where_it_lives(video, mode):
    with HostEngine() as engine, pytest.raises(
        ArgumentError, match=rf"memory_mode='{mode}' and no device: .*made on the CPU.*device="
    ):
        _loader(video[0], dtype=torch.float32, memory_mode=mode, engine=engine)


@pytest.mark.parametrize("mode", ["pinned", "mapped", "managed", "host"])
@_GPU_SETTINGS
@given(
    delay_s=st.sampled_from([0.0, 0.002, 0.01, 0.03]),
    batches=st.integers(1, 10),
    held=st.integers(0, 4),
)
def test_float_batches_are_made_on_the_device_from_an_intact_slot(
    video, mode, delay_s, batches, held
):
    path, reference = video
    with HostEngine(copy_delay_s=delay_s) as engine:
        read, kept = [], collections.deque(maxlen=held or None)
        with _loader(path, dtype=torch.float32, mean=_MEAN, std=_STD, memory_mode=mode,
                     device="cuda", engine=engine) as loader:  # fmt: skip
            for _, batch in zip(range(batches), loader):
                assert engine.is_device_tensor(batch.frames)
                assert batch.frames.dtype == torch.float32
                read.append((batch.meta[0].seq, engine.read_later(batch.frames)))
                if held:
                    kept.append(batch)
                del batch
            stats = loader.stats()
        kept.clear()
        engine.synchronize()
        assert engine.stats()["torn_copies"] == 0
    assert len(read) == min(batches, len(reference))
    for seq, got in read:
        want = _normalised(reference[seq], _MEAN, _STD)
        assert torch.allclose(got[0], want, atol=1e-5), (
            f"frame {seq} converted from a rewritten slot"
        )
    assert stats["outputs_made"] == 0  # made on the device, not in CPU outputs
    assert stats["output_batch_bytes"] == 3 * _SIZE[0] * _SIZE[1] * 4


@pytest.mark.parametrize("side", [False, True])
@pytest.mark.parametrize("mode", ["pinned", "mapped", "managed"])
@_GPU_SETTINGS
@given(delay_s=st.sampled_from([0.002, 0.01, 0.03]), batches=st.integers(1, 10))
def test_batch_to_keeps_the_slot_until_the_copy_has_read_it(video, side, mode, delay_s, batches):
    """``side``: the copy is queued on a stream of its own, and the batch is dropped on
    the default one, whose fence alone does not cover the copy."""
    path, reference = video
    with HostEngine(copy_delay_s=delay_s) as engine:
        read, stream = [], engine.new_stream()
        with _loader(path, memory_mode=mode, engine=engine) as loader:
            for _, batch in zip(range(batches), loader):
                with engine.use_stream(stream) if side else contextlib.nullcontext():
                    moved = batch.to("cuda", non_blocking=True, engine=engine)
                assert engine.is_device_tensor(moved.frames)
                assert engine.is_device_tensor(moved.valid)
                assert moved.meta is batch.meta
                del batch  # only the lease rule keeps the slot from the next frames now
                with engine.use_stream(stream) if side else contextlib.nullcontext():
                    read.append((moved.meta[0].seq, engine.read_later(moved.frames)))
                del moved
        engine.synchronize()
        assert engine.stats()["torn_copies"] == 0
    assert len(read) == min(batches, len(reference))
    for seq, got in read:
        assert torch.equal(got[0], reference[seq]), f"frame {seq} copied from a rewritten slot"


def test_batch_to_the_cpu_or_where_it_is_returns_it(video):
    with HostEngine() as engine:
        with _loader(video[0], dtype=torch.float32, device="cuda", engine=engine) as loader:
            batch = next(iter(loader))
            assert batch.to("cuda", engine=engine) is batch
            on_cpu = batch.to("cpu")
        with _loader(video[0]) as loader:
            plain = next(iter(loader))
            assert plain.to("cpu") is plain
    assert on_cpu.frames.device.type == "cpu"
