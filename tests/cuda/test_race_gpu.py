"""The lease rule on a real GPU: a long kernel keeps the GPU busy while batches flow.

Each step queues a spin kernel (the model, slow), then the batch's copy or zero-copy
read behind it, then a checksum of every frame on the GPU, and drops the CPU batch at
once, as ``x = x.cuda(non_blocking=True)`` does. If a slot went back to the workers
before the GPU read it, a later batch's bytes show up in an earlier checksum. The same
loops run on HostEngine in test_lease_on_engine.py on every CI run; this file is the
check that CUDA's streams and events behave as the host engine assumes.
"""

from __future__ import annotations

import numpy as np
import pytest
from _media import clip, media_dir

import edgeload
from edgeload.cuda.memory import memory_mode_of
from edgeload.video import StreamLoader

pytestmark = pytest.mark.cuda

# ~5-20 ms of GPU time per batch: long against a 100 KB copy, short for the whole file.
_SPIN_CYCLES = 20_000_000
_SAMPLE = (64, 64, 3)


class Samples:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        return np.random.default_rng(index).integers(0, 256, _SAMPLE, dtype=np.uint8)


def _sums(frames, torch):
    return frames.reshape(frames.shape[0], -1).sum(dim=1, dtype=torch.int64)


@pytest.mark.parametrize(
    ("mode", "pin"), [("pinned", False), ("mapped", False), ("managed", False), ("host", True)]
)
def test_dataloader_batches_survive_a_busy_gpu(mode, pin):
    import torch

    data = Samples(48 * 4)
    expected = [int(data[i].sum(dtype=np.int64)) for i in range(len(data))]
    loader = edgeload.DataLoader(
        data, batch_size=4, num_workers=2, worker_kind="thread", memory_mode=mode,
        pin_memory=pin,
    )  # fmt: skip
    sums = []
    with loader:
        for batch in loader:
            torch.cuda._sleep(_SPIN_CYCLES)  # the model, still busy when the copy is queued
            if mode in ("mapped", "managed") and memory_mode_of(batch) == mode:
                on_gpu = edgeload.cuda.as_cuda_tensor(batch)
            else:
                on_gpu = batch.cuda(non_blocking=True)
            del batch
            sums.append(_sums(on_gpu, torch))
            del on_gpu
        stats = loader.stats()
    torch.cuda.synchronize()
    got = [int(s) for chunk in sums for s in chunk.cpu()]
    assert got == expected, f"a batch was overwritten before the GPU read it ({stats})"


@pytest.mark.parametrize("mode", ["pinned", "mapped", "managed", "host"])
def test_streamloader_batches_survive_a_busy_gpu(tmp_path_factory, mode):
    import torch

    path = clip(media_dir(tmp_path_factory), size=(160, 120), fps=30, seconds=2.0)
    with StreamLoader([path], size=(128, 96), policy="every") as loader:
        expected = {b.meta[0].seq: int(b.frames.sum(dtype=torch.int64)) for b in loader}
    got = {}
    with StreamLoader(
        [path], size=(128, 96), policy="every", memory_mode=mode, device="cuda"
    ) as loader:
        for batch in loader:
            assert batch.frames.is_cuda
            torch.cuda._sleep(_SPIN_CYCLES)
            got[batch.meta[0].seq] = batch.frames.sum(dtype=torch.int64)
            del batch
    torch.cuda.synchronize()
    assert {seq: int(s) for seq, s in got.items()} == expected
