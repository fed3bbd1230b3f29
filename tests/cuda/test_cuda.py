"""GPU memory modes on a real CUDA device: zero-copy views, fences, async copies, lifetimes.

Every test here carries the ``cuda`` marker: conftest.py skips it without usable CUDA,
or fails it when ``EDGELOAD_REQUIRE_CUDA=1`` (as scripts/device_check.sh sets it), so a
GPU box that lost its CUDA cannot pass by skipping.
"""

from __future__ import annotations

import gc
import time
import weakref

import numpy as np
import pytest

# Internal: the CUDA lease fences (a slot's pending GPU work) have no public surface.
from edgeload.cuda._lease import gpu_busy, record_gpu_use, wait_gpu_idle
from edgeload.cuda.memory import allocate_gpu_array, as_cuda_tensor, memory_mode_of
from edgeload.cuda.status import GPU_MEMORY_MODES, check_memory_mode, cuda_device
from edgeload.cuda.transfer import DeviceCopier
from edgeload.pipeline.slots import SlotPool

pytestmark = pytest.mark.cuda

# torch.cuda._sleep spins a kernel for this many GPU cycles: ~0.1-0.3 s on any GPU,
# long enough that work queued behind it is certainly still pending when checked.
_SPIN_CYCLES = 300_000_000
_FRAME = (4, 120, 160, 3)


def _slot(mode, shape=_FRAME):
    return allocate_gpu_array(mode, int(np.prod(shape))).reshape(shape)


def _frames(seed, shape=_FRAME):
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def _decode_into(source, target):
    """Write a frame in place the way the video path does (OpenCV resize into the slot)."""
    try:
        import cv2
    except ImportError:  # a bare GPU box may lack OpenCV: numpy is still a CPU writer
        target[:] = source[
            :: source.shape[0] // target.shape[0], :: source.shape[1] // target.shape[1]
        ]
        return
    cv2.resize(source, (target.shape[1], target.shape[0]), dst=target, interpolation=cv2.INTER_AREA)


def test_device_reports_its_memory_features():
    device = cuda_device()
    assert device.name
    assert device.compute_capability >= (5, 0)
    assert device.can_map_host_memory
    assert set(device.to_dict()) >= {"integrated", "io_coherent", "concurrent_managed_access"}


@pytest.mark.parametrize("mode", GPU_MEMORY_MODES)
def test_each_gpu_mode_gives_page_aligned_cpu_writable_slots(mode):
    check_memory_mode(mode)
    flat = allocate_gpu_array(mode, 1 << 20)
    assert flat.dtype == np.uint8
    assert flat.shape == (1 << 20,)
    assert flat.ctypes.data % 4096 == 0
    assert memory_mode_of(flat) == mode
    assert memory_mode_of(flat[4096:].reshape(-1, 16)) == mode
    flat[:] = 7
    assert int(flat.sum()) == 7 << 20


@pytest.mark.parametrize("mode", ["mapped", "managed"])
def test_zero_copy_tensor_sees_the_decoders_writes(mode):
    import torch

    slot = _slot(mode)
    tensor = as_cuda_tensor(slot)
    assert tensor.is_cuda
    assert tensor.shape == slot.shape
    assert tensor.dtype == torch.uint8
    # The decoder writes after the view exists: the GPU must read these very bytes.
    sources = _frames(1, (4, 240, 320, 3))
    for i in range(slot.shape[0]):
        _decode_into(sources[i], slot[i])
    torch.cuda.synchronize()
    assert torch.equal(tensor.cpu(), torch.from_numpy(slot.copy()))
    assert int(tensor.sum(dtype=torch.int64)) == int(slot.sum(dtype=np.int64))
    # And the other way: the CPU sees what a kernel wrote, without a copy back.
    tensor[1].zero_()
    torch.cuda.synchronize()
    assert not slot[1].any()


def test_zero_copy_view_of_a_slice_points_into_the_same_memory():
    import torch

    slot = _slot("mapped")
    slot[:] = _frames(2)
    part = as_cuda_tensor(slot[2])
    torch.cuda.synchronize()
    assert torch.equal(part.cpu(), torch.from_numpy(slot[2].copy()))


def test_tensor_holds_the_slot_lease_until_it_dies():
    slot = _slot("mapped")
    frame = slot[0]
    lease = weakref.ref(frame)
    tensor = as_cuda_tensor(frame)
    del frame
    gc.collect()
    assert lease() is not None, "the slot view died while a CUDA tensor still reads it"
    del tensor
    gc.collect()
    # Released once the (empty) GPU queue behind the tensor's fence has drained.
    assert _wait_for(lambda: lease() is None), "slot view kept after its tensor and GPU work"


def test_in_use_slot_is_not_rewritten_while_gpu_work_is_queued():
    import torch

    slot = _slot("mapped")
    results = []
    for batch in range(3):
        # The pool's rule: a worker writes a slot only once the GPU is done with it.
        assert wait_gpu_idle(slot, timeout_s=30.0)
        slot[:] = batch + 1
        tensor = as_cuda_tensor(slot)
        torch.cuda._sleep(_SPIN_CYCLES)  # the model is slow: the read below stays queued
        results.append(tensor.sum(dtype=torch.int64))
        del tensor  # the user is done; the GPU is not
        assert gpu_busy(slot), "slot counted free while a queued kernel still reads it"
    torch.cuda.synchronize()
    assert [int(r) for r in results] == [(b + 1) * slot.size for b in range(3)]
    assert not gpu_busy(slot)


def test_fence_covers_only_the_bytes_it_names():
    import torch

    slot = _slot("mapped")
    torch.cuda._sleep(_SPIN_CYCLES)
    record_gpu_use(slot[0])
    assert gpu_busy(slot[0])
    assert gpu_busy(slot)
    assert not gpu_busy(slot[1])
    torch.cuda.synchronize()
    assert not gpu_busy(slot)


def test_pinned_async_copy_equals_the_source():
    import torch

    copier = DeviceCopier()
    slot = _slot("pinned")
    slot[:] = _frames(3)
    expected = torch.from_numpy(slot.copy())
    transfer = copier.copy(slot)
    gpu = transfer.tensor()
    assert gpu.is_cuda
    assert torch.equal(gpu.cpu(), expected)
    assert copier.copies == 1
    assert copier.bytes_copied == slot.nbytes == transfer.nbytes


def test_copy_of_the_next_batch_overlaps_the_model_on_this_one():
    import torch

    copier = DeviceCopier()
    slot = _slot("pinned")
    slot[:] = _frames(4)
    copier.copy(slot).tensor()  # warm up: a first cudaMalloc may wait for the device
    torch.cuda.synchronize()
    model_done = torch.cuda.Event()
    torch.cuda._sleep(_SPIN_CYCLES)  # the model, busy with batch k on the current stream
    model_done.record()
    transfer = copier.copy(slot)  # batch k+1 goes up on the side stream meanwhile
    transfer.event.synchronize()
    assert not model_done.query(), "the copy waited for the model instead of overlapping it"
    assert not gpu_busy(slot), "the slot stayed fenced after its copy finished"
    gpu = transfer.tensor()  # orders the consumer after the copy
    assert torch.equal(gpu.cpu(), torch.from_numpy(slot.copy()))


def test_slot_is_fenced_until_its_copy_has_run():
    import torch

    copier = DeviceCopier()
    slot = _slot("pinned")
    slot[:] = 9
    # Hold the side stream up so the copy is certainly still queued.
    with torch.cuda.stream(copier.stream):
        torch.cuda._sleep(_SPIN_CYCLES)
    transfer = copier.copy(slot)
    assert gpu_busy(slot)
    assert wait_gpu_idle(slot, timeout_s=30.0)
    slot[:] = 0  # rewriting now must not change what was copied
    assert int(transfer.tensor().sum(dtype=torch.int64)) == 9 * slot.size


@pytest.mark.parametrize("mode", GPU_MEMORY_MODES)
def test_memory_is_freed_only_after_views_and_gpu_work_are_gone(mode):
    import torch

    slot = _slot(mode)
    slot[:] = 3
    root = slot
    while isinstance(root, np.ndarray):
        root = root.base
    owner = weakref.ref(root)  # the object that owns the CUDA allocation
    result = None
    if mode == "pinned":
        transfer = DeviceCopier().copy(slot)
    else:
        transfer = None
        tensor = as_cuda_tensor(slot)
        result = tensor.sum(dtype=torch.int64)
        del tensor
    torch.cuda._sleep(_SPIN_CYCLES)  # keep the stream busy behind the read
    record_gpu_use(slot)
    del slot
    gc.collect()
    assert owner() is not None, "CUDA memory freed while queued GPU work still reads it"
    torch.cuda.synchronize()
    assert _wait_for(lambda: owner() is None), "CUDA memory never freed"
    if result is not None:
        assert int(result) == 3 * int(np.prod(_FRAME))
    if transfer is not None:
        assert int(transfer.tensor().sum(dtype=torch.int64)) == 3 * int(np.prod(_FRAME))


def _wait_for(predicate, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True


@pytest.mark.parametrize("mode", GPU_MEMORY_MODES)
def test_slot_pool_hands_out_gpu_slots(mode):
    with SlotPool(_FRAME, count=2, mode=mode) as pool:
        slot = pool.acquire(timeout_s=5.0)
        assert memory_mode_of(slot.array) == mode
        slot.array[:] = 5
        view = pool.lease(slot)
        assert memory_mode_of(view) == mode
        assert int(view.sum(dtype=np.int64)) == 5 * view.size


def test_pool_does_not_hand_out_a_mapped_slot_while_the_gpu_reads_it():
    import torch

    with SlotPool(_FRAME, count=2, mode="mapped") as pool:
        slot = pool.acquire(timeout_s=5.0)
        other = pool.acquire(timeout_s=5.0)  # a producer's: the dropped slot is all there is
        slot.array[:] = 1
        view = pool.lease(slot)
        tensor = as_cuda_tensor(view)
        torch.cuda._sleep(_SPIN_CYCLES)
        result = tensor.sum(dtype=torch.int64)
        del view, tensor  # the user let go; the queued sum has not run yet
        gc.collect()
        with pytest.raises(TimeoutError, match="still read by the GPU"):
            pool.acquire(timeout_s=0)
        again = pool.acquire(timeout_s=30.0)  # once the sum has run
        assert again.index == slot.index
        assert int(result) == int(np.prod(_FRAME))
        assert pool.stats().gpu_waits >= 1
        pool.release(again)
        pool.release(other)


def test_pool_keeps_a_pinned_slot_leased_until_its_copy_ran():
    import torch

    with SlotPool(_FRAME, count=2, mode="pinned") as pool:
        copier = DeviceCopier()
        slot = pool.acquire(timeout_s=5.0)
        slot.array[:] = 2
        view = pool.lease(slot)
        with torch.cuda.stream(copier.stream):
            torch.cuda._sleep(_SPIN_CYCLES)
        transfer = copier.copy(view)
        del view
        gc.collect()
        assert pool.stats().leased == 1, "slot back in the pool while its copy is queued"
        assert _wait_for(lambda: pool.stats().leased == 0), "slot never came back"
        assert int(transfer.tensor().sum(dtype=torch.int64)) == 2 * int(np.prod(_FRAME))


@pytest.mark.parametrize(
    ("mode", "copied"), [("pinned", True), ("mapped", False), ("managed", False)]
)
def test_to_device_picks_copy_or_zero_copy_from_the_slot_mode(mode, copied):
    import torch

    copier = DeviceCopier()
    with SlotPool(_FRAME, count=2, mode=mode) as pool:
        slot = pool.acquire(timeout_s=5.0)
        slot.array[:] = _frames(5)
        expected = torch.from_numpy(slot.array.copy())
        view = pool.lease(slot)
        transfer = copier.to_device(view)
        gpu = transfer.tensor()
        assert gpu.device == copier.device
        assert torch.equal(gpu.cpu(), expected)
        assert transfer.nbytes == (view.nbytes if copied else 0)
        assert copier.bytes_copied == transfer.nbytes
        del view, gpu, transfer
        torch.cuda.synchronize()
        assert _wait_for(lambda: pool.stats().leased == 0)


_FORK_SCRIPT = """
import torch, edgeload
from edgeload.platform.probe import probe
loader = edgeload.DataLoader(list(range(64)), batch_size=8, num_workers=2,
                             multiprocessing_context="fork")
for epoch in range(2):
    assert sum(len(b) for b in loader) == 64, epoch
print(probe().gpu.facts_from, "| cuda initialised:", torch.cuda.is_initialized())
"""


def test_explicit_fork_works_on_a_cuda_machine():
    """Defect 2: the live probe initialised CUDA, so an explicit fork was refused."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _FORK_SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "cuda initialised: False" in done.stdout, done.stdout
