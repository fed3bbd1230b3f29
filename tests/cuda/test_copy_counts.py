"""Full-batch copies per batch, per memory mode and loader, counted on the host engine.

The promise (docs/performance.md, "Copies per batch"): after decode or collate writes
a slot, ``mapped`` and ``managed`` batches reach the GPU with 0 copies, ``pinned`` with
1 (the async H2D copy), ``host`` + ``.cuda()`` with 1 pageable copy, and torch's stock
``pin_memory=True`` recipe with 2 (into pinned memory, then H2D).
"""

from __future__ import annotations

import collections

import pytest
from _media import clip, media_dir
from test_lease_on_engine import _BATCH, Samples

from edgeload import DataLoader

# Internal: whether a batch lies in slot memory is known only to the GPU lease registry.
from edgeload.cuda._lease import find_owner
from edgeload.cuda.host_engine import HostEngine
from edgeload.cuda.memory import as_cuda_tensor
from edgeload.video import StreamLoader


def _per_batch(engine, step, batches):
    """Copies by kind per batch: the user's step on batch i plus the loader's work to
    deliver batch i+1, over pairs of steady-state batches (``step`` says which)."""
    total, counted, previous = collections.Counter(), 0, None
    for batch in batches:
        now = engine.copies()
        steady = step(batch)
        if previous is not None and steady:
            total.update({k: now[k] - previous[k] for k in now})
            counted += 1
        previous = now if steady else None
    assert counted >= 4, "too few slot batches to count"
    return {k: v / counted for k, v in total.items() if v}


def _in_slot(batch):
    owner = find_owner(batch)  # a slot pool's allocation is larger than one batch
    return owner is not None and owner.nbytes > batch.element_size() * batch.nelement()


@pytest.mark.parametrize(
    ("mode", "pin", "recipe", "expected"),
    [
        ("mapped", False, "as_cuda_tensor", {}),
        ("managed", False, "as_cuda_tensor", {}),
        ("pinned", False, ".cuda()", {"h2d_async": 1}),
        ("pinned", True, ".cuda()", {"h2d_async": 1}),  # slots are page-locked already
        ("host", False, ".cuda()", {"h2d_pageable": 1}),
        ("host", True, ".cuda()", {"pin": 1, "h2d_async": 1}),  # torch's stock recipe
    ],
)
def test_dataloader_copies_per_batch(mode, pin, recipe, expected):
    with HostEngine() as engine:
        loader = DataLoader(
            Samples(16 * _BATCH), batch_size=_BATCH, num_workers=2, worker_kind="thread",
            memory_mode=mode, pin_memory=pin, engine=engine,
        )  # fmt: skip

        def step(batch):
            # The first batches are collated before the slots exist, and a task that
            # finds no free slot writes fresh memory: count batches in slots only.
            steady = mode == "host" or _in_slot(batch)
            if steady:
                if recipe == "as_cuda_tensor":
                    on_gpu = as_cuda_tensor(batch)
                else:
                    on_gpu = engine.to_device(batch, "cuda", non_blocking=True)
                assert engine.is_device_tensor(on_gpu)
            return steady

        with loader:
            assert _per_batch(engine, step, loader) == expected


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("mapped", {}),
        ("managed", {}),
        ("pinned", {"h2d_async": 1}),
        ("host", {"h2d_pageable": 1}),
    ],
)
def test_streamloader_copies_per_batch(tmp_path_factory, mode, expected):
    path = clip(media_dir(tmp_path_factory), size=(160, 120), fps=30, seconds=1.0)
    with HostEngine() as engine:
        loader = StreamLoader(
            [path], size=(64, 48), policy="every", memory_mode=mode, device="cuda", engine=engine
        )
        with loader:
            batches = iter(loader)
            copies = []
            for batch in batches:  # the copy happens inside next(): count around it
                copies.append(engine.copies())
                assert engine.is_device_tensor(batch.frames)
            del batch
            # A batch that found no free slot (a loaded box: the mux ran ahead of a
            # consumer still holding the previous batch) was written to fresh host
            # memory, and its one pageable copy is that fallback's, not the mode's.
            fallbacks = loader.stats()["slot_copies"]
        per_kind = collections.Counter()
        for before, after in zip(copies, copies[1:]):
            per_kind.update({k: after[k] - before[k] for k in after})
        steps = len(copies) - 1
        assert steps >= 10 and fallbacks <= steps // 4
        for kind in set(per_kind) | set(expected):
            want = expected.get(kind, 0) * steps
            assert want <= per_kind[kind] <= want + fallbacks, (kind, dict(per_kind), fallbacks)
