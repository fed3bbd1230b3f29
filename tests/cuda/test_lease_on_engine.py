"""Both loaders on the host engine: no batch is overwritten before the GPU read it.

The user's side of each loop is what a training loop does on a GPU, spelled through the
engine: ``engine.to_device(batch, non_blocking=True)`` is ``batch.cuda(non_blocking=True)``,
``engine.read_later(t)`` is a kernel that reads ``t`` when its turn on the stream comes.
The engine's copies and kernels read their input when they run, after ``copy_delay_s``,
so a slot handed to a producer too early shows up as a wrong batch.

Hypothesis varies the GPU's delay, the number of batches and how many batches the user
keeps; every batch that reached the "GPU" must equal the one the loader delivered.
"""

from __future__ import annotations

import collections
import logging

import numpy as np
import pytest
import torch
from _media import clip, media_dir
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgeload import DataLoader
from edgeload.cuda.host_engine import HostEngine
from edgeload.cuda.memory import as_cuda_tensor, memory_mode_of
from edgeload.errors import PlatformError
from edgeload.video import StreamLoader

_SAMPLE = (8, 8, 3)
_BATCH = 4
_GPU_SETTINGS = settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


class Samples:
    """A map-style dataset whose every sample says which index it is."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        sample = np.full(_SAMPLE, index % 251, np.uint8)
        sample[0, 0, 0] = index // 251
        return sample


def _expected(indices):
    return torch.from_numpy(np.stack([Samples(0)[i] for i in indices]))


def _loader(engine, mode, n, *, pin=False):
    return DataLoader(
        Samples(n),
        batch_size=_BATCH,
        num_workers=2,
        worker_kind="thread",
        memory_mode=mode,
        pin_memory=pin,
        engine=engine,
    )


def _user_step(engine, batch, mode):
    """What the training loop does with one batch: returns what the GPU will have read."""
    if mode in ("mapped", "managed") and memory_mode_of(batch) == mode:
        return engine.read_later(as_cuda_tensor(batch))  # zero-copy: the kernel reads the slot
    return engine.read_later(engine.to_device(batch, "cuda", non_blocking=True))


@pytest.mark.parametrize(("mode", "pin"), [("pinned", False), ("mapped", False),
                                           ("managed", False), ("host", True)])  # fmt: skip
@_GPU_SETTINGS
@given(
    delay_s=st.sampled_from([0.0, 0.002, 0.01, 0.02]),
    batches=st.integers(1, 24),
    held=st.integers(0, 4),
)
def test_dataloader_batches_reach_the_gpu_intact(mode, pin, delay_s, batches, held):
    with HostEngine(copy_delay_s=delay_s) as engine:
        on_gpu, kept = [], collections.deque(maxlen=held or None)
        with _loader(engine, mode, batches * _BATCH, pin=pin) as loader:
            for batch in loader:
                on_gpu.append(_user_step(engine, batch, mode))
                if held:
                    kept.append(batch)
                del batch  # the CPU view goes at once: only the pool's fence guards the slot
            stats = loader.stats()
        kept.clear()
        engine.synchronize()
        assert engine.stats()["torn_copies"] == 0
    assert len(on_gpu) == batches
    for i, got in enumerate(on_gpu):
        want = _expected(range(i * _BATCH, (i + 1) * _BATCH))
        assert torch.equal(got, want), f"batch {i} was overwritten before the GPU read it"
    assert stats["memory_mode"] == mode


def test_dataloader_slot_reuse_waits_for_a_slow_gpu():
    with HostEngine(copy_delay_s=0.03) as engine:
        on_gpu = []
        with _loader(engine, "pinned", 16 * _BATCH) as loader:
            for batch in loader:
                on_gpu.append(_user_step(engine, batch, "pinned"))
                del batch
            stats = loader.stats()
        engine.synchronize()
    assert stats["slot_gpu_waits"] > 0, stats
    for i, got in enumerate(on_gpu):
        assert torch.equal(got, _expected(range(i * _BATCH, (i + 1) * _BATCH)))


@pytest.mark.parametrize("mode", ["mapped", "pinned"])
def test_dataloader_user_who_keeps_every_gpu_batch_loses_none(mode):
    """Kept zero-copy views hold their slots: later tasks write fresh memory instead."""
    with HostEngine(copy_delay_s=0.002) as engine:
        kept = []
        with _loader(engine, mode, 24 * _BATCH) as loader:
            for batch in loader:
                if mode == "mapped" and memory_mode_of(batch) == mode:
                    kept.append(as_cuda_tensor(batch))
                else:
                    kept.append(engine.to_device(batch, "cuda", non_blocking=True))
                del batch
            stats = loader.stats()
        engine.synchronize()
        for i, on_gpu in enumerate(kept):
            assert torch.equal(on_gpu, _expected(range(i * _BATCH, (i + 1) * _BATCH)))
    assert stats["slots"] <= 8, stats  # bounded: the pool did not grow with the user's hoard


@pytest.fixture(scope="module")
def video(tmp_path_factory):
    path = clip(media_dir(tmp_path_factory), size=(160, 120), fps=30, seconds=1.0)
    with StreamLoader([path], size=(64, 48), policy="every") as loader:
        reference = {b.meta[0].seq: b.frames[0].clone() for b in loader}
    return path, reference


@pytest.mark.parametrize("mode", ["pinned", "mapped", "managed", "host"])
@_GPU_SETTINGS
@given(
    delay_s=st.sampled_from([0.0, 0.002, 0.01, 0.03]),
    batches=st.integers(1, 12),
    held=st.integers(0, 6),
)
def test_streamloader_batches_reach_the_gpu_intact(video, mode, delay_s, batches, held):
    path, reference = video
    with HostEngine(copy_delay_s=delay_s) as engine:
        read, kept = [], collections.deque(maxlen=held or None)
        with StreamLoader(
            [path], size=(64, 48), policy="every", memory_mode=mode, device="cuda", engine=engine
        ) as loader:
            for _, batch in zip(range(batches), loader):
                assert engine.is_device_tensor(batch.frames)
                read.append((batch.meta[0].seq, engine.read_later(batch.frames)))
                if held:
                    kept.append(batch)
                del batch
        kept.clear()
        engine.synchronize()
        assert engine.stats()["torn_copies"] == 0
    assert len(read) == min(batches, len(reference))
    for seq, got in read:
        assert torch.equal(got[0], reference[seq]), (
            f"frame {seq} overwritten before the GPU read it"
        )


def test_a_user_who_keeps_every_zero_copy_batch_gets_copies_logged_once(video, caplog):
    path, reference = video
    caplog.set_level(logging.WARNING, logger="edgeload")
    with HostEngine(copy_delay_s=0.001) as engine:
        with StreamLoader(
            [path], size=(64, 48), policy="every", memory_mode="mapped", device="cuda",
            engine=engine,
        ) as loader:  # fmt: skip
            kept = list(loader)
            stats = loader.stats()
        engine.synchronize()
        assert [b.meta[0].seq for b in kept] == sorted(reference)
        for batch in kept:
            assert torch.equal(batch.frames[0], reference[batch.meta[0].seq])
    assert stats["slot_copies"] > 0
    warnings = [r for r in caplog.records if "later batches are copies" in r.getMessage()]
    assert len(warnings) == 1


@pytest.mark.parametrize("device", ["cuda:1", "cuda:7"])
def test_streamloader_refuses_a_device_the_engine_lacks_before_any_thread(video, device):
    with HostEngine(device_count=1) as engine, pytest.raises(
        PlatformError, match=rf"device='{device}' does not exist here .*'cuda:0'"
    ):
        StreamLoader([video[0]], device=device, engine=engine)


def test_streamloader_without_cuda_refuses_device_and_gpu_modes_in_the_constructor(video):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(PlatformError, match=r"device='cuda' needs a CUDA device"):
        StreamLoader([video[0]], device="cuda")
    for mode in ("pinned", "mapped", "managed"):
        with pytest.raises(PlatformError, match=rf"memory_mode='{mode}'.*'host'"):
            StreamLoader([video[0]], memory_mode=mode)
