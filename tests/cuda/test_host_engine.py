"""The GPU-mode code paths on the host engine: streams, events, fences, views, slot reuse.

Each test here runs the very code a CUDA machine runs (edgeload.cuda.memory, _lease,
transfer, the slot pool's GPU guard); only the engine underneath is HostEngine,
whose copies read their source when they run, not when they are queued, as a DMA engine
does.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from edgeload.cuda import _runtime as _cuda

# Internal: the CUDA lease fences and slot registry have no public surface.
from edgeload.cuda._lease import gpu_busy
from edgeload.cuda.host_engine import HostEngine
from edgeload.cuda.memory import (
    allocate_gpu_array,
    as_cuda_tensor,
    cuda_array_interface,
    memory_mode_of,
)
from edgeload.cuda.transfer import DeviceCopier
from edgeload.errors import PlatformError
from edgeload.pipeline.slots import SlotPool

# Long against anything the CPU does between queueing a copy and checking on it.
_SLOW_S = 0.3


@pytest.fixture
def engine():
    with HostEngine() as made:
        yield made


def _wait_for(condition, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True


def test_streams_run_in_order_and_events_complete_when_reached(engine):
    stream = engine.new_stream()
    order = []
    gate = engine.hold(stream=stream)
    stream.submit(0.0, lambda: order.append("first"))
    event = engine.new_event()
    event.record(stream)
    stream.submit(0.0, lambda: order.append("second"))
    assert not event.query()
    gate.set()
    event.synchronize()
    assert order[0] == "first"
    stream.synchronize()
    assert order == ["first", "second"]


def test_a_stream_waiting_on_an_event_waits_for_the_other_stream(engine):
    producer, consumer = engine.new_stream(), engine.new_stream()
    seen = []
    engine.busy(_SLOW_S, stream=producer)
    producer.submit(0.0, lambda: seen.append("copy"))
    done = engine.new_event()
    done.record(producer)
    consumer.wait_event(done)
    consumer.submit(0.0, lambda: seen.append("model"))
    consumer.synchronize()
    assert seen == ["copy", "model"]


def test_an_async_copy_reads_its_source_when_it_runs(engine):
    """The engine models the race itself: a rewrite while the copy is queued is seen."""
    slot = allocate_gpu_array("pinned", 4096, engine=engine)
    slot[:] = 1
    gate = engine.hold()
    on_gpu = engine.to_device(torch.from_numpy(slot), "cuda", non_blocking=True)
    slot[:] = 2  # what a pool without the GPU half of the lease rule lets a producer do
    gate.set()
    engine.synchronize()
    assert int(on_gpu[0]) == 2
    assert engine.stats()["torn_copies"] == 1


def test_a_pageable_copy_is_staged_at_once(engine):
    host = torch.ones(4096, dtype=torch.uint8)
    engine.busy(_SLOW_S)
    on_gpu = engine.to_device(host, "cuda", non_blocking=True)
    host[:] = 2
    engine.synchronize()
    assert int(on_gpu.sum()) == 4096
    assert engine.copies()["h2d_pageable"] == 1


@pytest.mark.parametrize("mode", ["pinned", "mapped", "managed"])
def test_pool_does_not_hand_out_a_slot_whose_copy_is_queued(engine, mode):
    """Defect 1: the consumer drops a batch right after queueing its copy; the next
    acquire must not return that slot until the copy has run."""
    with SlotPool((64,), np.uint8, count=2, mode=mode, engine=engine) as pool:
        slot = pool.acquire(timeout_s=1)
        filling = pool.acquire(timeout_s=1)  # another producer's: the dropped slot is all there is
        slot.array[:] = 7
        batch = torch.from_numpy(pool.lease(slot))
        model = engine.hold()  # the model's kernels, ahead of the copy on the stream
        on_gpu = engine.to_device(batch, "cuda", non_blocking=True)
        del batch  # `x = x.cuda(non_blocking=True)` drops the CPU view at once
        gc.collect()
        with pytest.raises(TimeoutError, match="still read by the GPU"):
            pool.acquire(timeout_s=0)
        threading.Timer(0.05, model.set).start()
        again = pool.acquire(timeout_s=10)  # waits for the copy, then gets the slot
        again.array[:] = 9
        engine.synchronize()
        assert torch.equal(on_gpu, torch.full((64,), 7, dtype=torch.uint8))
        assert pool.stats().gpu_waits >= 1
        assert engine.stats()["torn_copies"] == 0
        assert again.index == slot.index
        pool.release(again)
        pool.release(filling)


def test_a_host_pool_has_no_gpu_guard(engine):
    with SlotPool((64,), np.uint8, count=1, mode="host") as pool:
        slot = pool.acquire(timeout_s=1)
        view = pool.lease(slot)
        del view
        gc.collect()
        pool.release(pool.acquire(timeout_s=0))
        assert pool.stats().gpu_waits == 0


def test_a_batch_tensor_finds_its_allocation_by_address(engine):
    """Defect 4: a torch tensor over a pool view is GPU memory, not 'host'."""
    with SlotPool((2, 8, 8, 3), np.uint8, count=2, mode="mapped", engine=engine) as pool:
        slot = pool.acquire(timeout_s=1)
        slot.array[:] = 5
        frames = torch.from_numpy(pool.lease(slot))
        assert memory_mode_of(frames) == "mapped"
        assert memory_mode_of(frames[1]) == "mapped"
        assert memory_mode_of(frames.numpy()[1, 2:]) == "mapped"
        assert memory_mode_of(np.zeros(8, np.uint8)) == "host"
        copier = DeviceCopier(engine=engine)
        transfer = copier.to_device(frames)
        assert transfer.nbytes == 0 and copier.copies == 0  # viewed in place
        assert engine.is_device_tensor(transfer.tensor())
        assert int(transfer.tensor().sum()) == 5 * frames.numel()


def test_a_read_only_view_gives_a_writable_interface(engine):
    """Defect 5: torch rejects read_only=True in __cuda_array_interface__."""
    flat = allocate_gpu_array("mapped", 4096, engine=engine)
    view = flat[:64]
    view.flags.writeable = False
    from edgeload.cuda._lease import find_owner

    assert cuda_array_interface(view, find_owner(view))["data"][1] is False
    tensor = as_cuda_tensor(view)
    assert tensor.shape == (64,)


def test_managed_memory_on_the_legacy_stream_attaches_globally(engine):
    """Defect 3: cudaMemAttachSingle is invalid on the NULL stream torch uses by default."""
    flat = allocate_gpu_array("managed", 4096, engine=engine)
    from edgeload.cuda._lease import find_owner

    owner = find_owner(flat)
    assert owner.attach_per_stream
    tensor = as_cuda_tensor(flat[:16])  # on the default (legacy) stream
    engine.synchronize()
    assert owner.attached == "global"
    del tensor
    gc.collect()
    engine.synchronize()
    assert owner.attached == "host"
    side = engine.new_stream()
    with engine.use_stream(side):
        tensor = as_cuda_tensor(flat[:16])
    side.synchronize()
    assert owner.attached == "single"
    del tensor


def test_the_fence_covers_the_stream_the_view_was_made_on(engine):
    """Defect 5: a view dropped by another thread (on another stream) must still fence
    the consumer's stream, where the model's kernels are queued."""
    flat = allocate_gpu_array("mapped", 4096, engine=engine)
    consumer = engine.new_stream()
    with engine.use_stream(consumer):
        tensor = as_cuda_tensor(flat[:64])
        model = engine.hold()  # the model reads the tensor here
    holder = [tensor]
    del tensor

    def drop():
        with engine.use_stream(engine.new_stream()):  # another thread, another stream
            holder.clear()
            gc.collect()

    dropper = threading.Thread(target=drop, name="test-dropper")
    dropper.start()
    dropper.join(10)
    assert gpu_busy(flat[:64]), "fence recorded only on the dropping thread's idle stream"
    model.set()
    assert _wait_for(lambda: not gpu_busy(flat[:64]))


def test_device_copier_refuses_a_device_the_engine_lacks(engine):
    with pytest.raises(PlatformError, match=r"device='cuda:2' does not exist here.*'cuda:0'"):
        DeviceCopier(device="cuda:2", engine=engine)


def test_an_unoffered_mode_names_one_that_works():
    with HostEngine(modes=("pinned",)) as engine, pytest.raises(
        PlatformError, match=r"memory_mode='mapped'.*use memory_mode='pinned'"
    ):
        allocate_gpu_array("mapped", 4096, engine=engine)


def test_cudart_of_torchs_cuda_release_comes_before_another_mapped_one(tmp_path, monkeypatch):
    """Defect 5: with a statically linked torch, the first mapped libcudart may be
    another library's (OpenCV's CUDA 11 here) rather than one of torch's release."""
    monkeypatch.delenv("EDGELOAD_CUDART", raising=False)
    maps = tmp_path / "maps"
    opencv = "/opt/opencv/lib/libcudart.so.11.0"
    wheel = "/site/nvidia/cuda_runtime/lib/libcudart.so.12"
    maps.write_text(
        f"7f00-7f01 r-xp 00000000 08:01 1 {opencv}\n7f02-7f03 r-xp 00000000 08:01 2 {wheel}\n"
    )
    found = _cuda.cudart_candidates(search_dirs=[], maps_path=str(maps), torch_cuda="12.4")
    assert found == [wheel, opencv]
    found = _cuda.cudart_candidates(search_dirs=[], maps_path=str(maps), torch_cuda="11.8")
    assert found == [opencv, wheel]


def test_views_alive_at_interpreter_exit_make_no_events():
    """Defect 5: fences made in finalisers at exit fail once the runtime is torn down."""
    script = (
        "import torch, edgeload.cuda.memory as m\n"
        "from edgeload.cuda.host_engine import HostEngine\n"
        "e = HostEngine()\n"
        "flat = m.allocate_gpu_array('mapped', 4096, engine=e)\n"
        "kept = m.as_cuda_tensor(flat[:16])\n"
        "e.new_event = None  # any event made from here on would raise\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "could not fence" not in done.stderr


def test_the_device_check_script_parses():
    script = Path(__file__).resolve().parents[2] / "scripts" / "device_check.sh"
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
