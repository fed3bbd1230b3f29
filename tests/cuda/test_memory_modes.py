"""Memory modes on any machine: selection by name, fallback, error paths, CUDA library discovery.

These run everywhere; on a machine without usable CUDA (CI) they check the errors a
user gets, on a CUDA machine the same calls must succeed.
"""

from __future__ import annotations

import ctypes.util
import gc
import json
import re
import sys
import threading
import time
import weakref

import numpy as np
import pytest

from edgeload.cuda import _runtime as _cuda

# Internal: the CUDA lease fences and slot registry have no public surface.
from edgeload.cuda._lease import (
    Fences,
    gpu_busy,
    hold_until_done,
    pending_holds,
    record_gpu_use,
    wait_gpu_idle,
)
from edgeload.cuda.memory import allocate_gpu_array, as_cuda_tensor, gpu_allocator, memory_mode_of
from edgeload.cuda.status import (
    GPU_MEMORY_MODES,
    MEMORY_MODES,
    CudaDevice,
    auto_memory_mode,
    check_memory_mode,
    cuda_status,
    resolve_memory_mode,
)
from edgeload.cuda.transfer import DeviceCopier
from edgeload.errors import PlatformError, ProfileError
from edgeload.pipeline.slots import SlotPool

CUDA = cuda_status()
no_cuda_only = pytest.mark.skipif(CUDA.usable, reason="checks the no-CUDA paths")


def test_cuda_status_is_a_usable_flag_and_a_reason():
    usable, reason = cuda_status()
    assert isinstance(usable, bool)
    assert reason
    if not usable:
        assert "CUDA" in reason or "torch" in reason


@pytest.mark.parametrize("mode", MEMORY_MODES)
def test_every_mode_is_selectable_by_name(mode):
    if mode == "host" or CUDA.usable:
        check_memory_mode(mode)
        assert resolve_memory_mode(mode) == (mode, "asked for explicitly")
        return
    with pytest.raises(PlatformError) as info:
        resolve_memory_mode(mode)
    message = str(info.value)
    assert f"memory_mode={mode!r} needs a CUDA device" in message
    assert CUDA.reason in message
    assert "Use memory_mode='host' (or 'auto')" in message


@no_cuda_only
def test_the_no_cuda_error_names_the_torch_build():
    import torch

    if torch.version.cuda is None:  # a CPU build, as this box's torch 2.13.0+cpu
        said = f"torch {torch.__version__} has no CUDA"
    else:  # a CUDA build on a machine without a GPU, as PyPI's torch 1.12.1+cu102 here
        said = f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no usable CUDA device"
    with pytest.raises(PlatformError, match=re.escape(said)):
        check_memory_mode("mapped")


@no_cuda_only
def test_auto_falls_back_to_host_with_the_reason():
    mode, reason = resolve_memory_mode("auto")
    assert mode == "host"
    assert reason == f"no CUDA: {CUDA.reason}"
    assert auto_memory_mode() == (mode, reason)


@pytest.mark.parametrize("bad", ["Mapped", "gpu", "", None, 3])
def test_unknown_mode_is_a_value_error_listing_the_modes(bad):
    with pytest.raises(ProfileError) as info:
        resolve_memory_mode(bad)
    assert isinstance(info.value, ValueError)
    assert f"got {bad!r}" in str(info.value)
    for mode in ("auto", *MEMORY_MODES):
        assert repr(mode) in str(info.value)


def test_missing_torch_reads_as_not_usable(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ImportError
    usable, reason = cuda_status()
    assert not usable
    assert reason.startswith("torch is not importable")
    with pytest.raises(PlatformError, match="torch is not importable"):
        check_memory_mode("pinned")
    assert auto_memory_mode()[0] == "host"


@pytest.mark.parametrize("nbytes", [0, -1, 1.5])
def test_allocate_rejects_bad_sizes(nbytes):
    with pytest.raises(ValueError, match=rf"nbytes must be a positive int, got {nbytes!r}"):
        allocate_gpu_array("pinned", nbytes)


def test_allocate_leaves_host_memory_to_the_pool():
    with pytest.raises(ValueError, match=r"host memory comes from edgeload\.pipeline\.slots"):
        allocate_gpu_array("host", 4096)  # type: ignore[arg-type]


@no_cuda_only
@pytest.mark.parametrize("mode", GPU_MEMORY_MODES)
def test_allocate_without_cuda_says_which_mode_works(mode):
    with pytest.raises(PlatformError, match=r"Use memory_mode='host' \(or 'auto'\)"):
        allocate_gpu_array(mode, 4096)


def test_host_arrays_are_host_memory_without_fences():
    array = np.zeros((2, 8, 8, 3), np.uint8)
    assert memory_mode_of(array) == "host"
    assert memory_mode_of(array[1]) == "host"
    assert record_gpu_use(array) is False
    assert gpu_busy(array) is False
    assert wait_gpu_idle(array, timeout_s=0.0) is True


def test_zero_copy_view_of_host_memory_is_refused_with_the_fix():
    with pytest.raises(
        ValueError, match=r"copy it to the GPU with edgeload\.cuda\.transfer\.DeviceCopier"
    ):
        as_cuda_tensor(np.zeros(16, np.uint8))


@no_cuda_only
def test_device_copier_without_cuda_says_why():
    with pytest.raises(
        PlatformError, match=r"device='cuda' needs a CUDA device; .*memory_mode='host'"
    ):
        DeviceCopier()


@pytest.mark.parametrize(
    ("capability", "integrated", "coherent"),
    [
        ((5, 3), True, False),  # Nano
        ((6, 2), True, False),  # TX2
        ((7, 2), True, True),  # Xavier
        ((8, 7), True, True),  # Orin
        ((9, 0), False, True),  # discrete H100/H200
    ],
)
def test_io_coherency_follows_the_jetson_generation(capability, integrated, coherent):
    device = CudaDevice(
        index=0,
        name="test",
        compute_capability=capability,
        integrated=integrated,
        can_map_host_memory=True,
        managed_memory=True,
        concurrent_managed_access=not integrated,
        pageable_memory_access=False,
        uses_host_page_tables=False,
    )
    assert device.io_coherent is coherent
    assert json.loads(json.dumps(device.to_dict()))["io_coherent"] is coherent


# --- the ctypes layer: finding and loading libcudart ----------------------------------


def test_candidates_put_the_override_then_the_mapped_library_first(tmp_path, monkeypatch):
    maps = tmp_path / "maps"
    mapped = "/opt/my cuda/lib/libcudart.so.12"  # a path with a space, as maps allows
    maps.write_text(
        "7f00-7f01 r-xp 00000000 08:01 123 /usr/lib/libc.so.6\n"
        f"7f02-7f03 r-xp 00000000 08:01 456 {mapped}\n"
        "7f04-7f05 rw-p 00000000 00:00 0\n"
    )
    (tmp_path / "libcudart.so.11.0").write_bytes(b"")
    (tmp_path / "libcudart.so.12").write_bytes(b"")
    (tmp_path / "libother.so").write_bytes(b"")
    monkeypatch.setenv("EDGELOAD_CUDART", "/custom/libcudart.so")
    found = _cuda.cudart_candidates(search_dirs=[str(tmp_path)], maps_path=str(maps))
    assert found == [
        "/custom/libcudart.so",
        mapped,
        str(tmp_path / "libcudart.so.12"),
        str(tmp_path / "libcudart.so.11.0"),
    ]


def test_candidates_without_any_library_are_empty(tmp_path, monkeypatch):
    monkeypatch.delenv("EDGELOAD_CUDART", raising=False)
    missing = str(tmp_path / "no-maps")
    assert _cuda.cudart_candidates(search_dirs=[str(tmp_path)], maps_path=missing) == []


def test_load_with_nothing_found_says_what_to_do():
    with pytest.raises(PlatformError, match=r"no libcudart found anywhere.*EDGELOAD_CUDART"):
        _cuda.load_cudart([])


def test_load_of_a_broken_file_names_it(tmp_path):
    broken = tmp_path / "libcudart.so.12"
    broken.write_bytes(b"not an ELF file")
    with pytest.raises(
        PlatformError, match=rf"cannot load .*{re.escape(str(broken))}: .*memory_mode='host'"
    ):
        _cuda.load_cudart([str(broken)])


def test_load_of_a_library_that_is_not_cudart_names_the_missing_call():
    libm = ctypes.util.find_library("m")
    if libm is None:
        pytest.skip("no libm to stand in for a wrong library")
    with pytest.raises(PlatformError, match=rf"{re.escape(libm)} has no cudaGetErrorString\(\)"):
        _cuda.load_cudart([libm])


def test_first_loadable_candidate_wins(tmp_path):
    real = [path for path in _cuda.cudart_candidates() if _loads(path)]
    if not real:
        pytest.skip("no libcudart on this machine")
    broken = tmp_path / "libcudart.so.99"
    broken.write_bytes(b"junk")
    assert _cuda.load_cudart([str(broken), real[0]]).path == real[0]


@no_cuda_only
def test_runtime_without_a_driver_raises_a_clear_error():
    real = [path for path in _cuda.cudart_candidates() if _loads(path)]
    if not real:
        pytest.skip("no libcudart on this machine (CI images usually have none)")
    runtime = _cuda.load_cudart([real[0]])
    page = ctypes.create_string_buffer(4096)
    for call in (
        runtime.current_device,
        lambda: runtime.host_alloc(4096, mapped=True),
        lambda: runtime.malloc_managed(4096, attach_global=True),
        lambda: runtime.device_attribute("integrated", 0),
        lambda: runtime.host_register(ctypes.addressof(page), 4096, mapped=True),
    ):
        with pytest.raises(PlatformError, match=r"CUDA cuda\w+\(?.*failed: .+ \(cudaError \d+\)"):
            call()


def _loads(path: str) -> bool:
    try:
        _cuda.load_cudart([path])
    except PlatformError:
        return False
    return True


# --- fences: CPU-side bookkeeping, with a gate standing in for a CUDA event -----------


class _GateEvent:
    """Completes when the test opens it, like a CUDA event when its stream gets there."""

    def __init__(self):
        self._gate = threading.Event()

    def query(self):
        return self._gate.is_set()

    def synchronize(self):
        self._gate.wait(5.0)

    def complete(self):
        self._gate.set()


def _fence_threads():
    return [t for t in threading.enumerate() if t.name == "edgeload-gpu-fence"]


def test_held_slot_view_lives_until_its_gpu_work_completes():
    event = _GateEvent()
    view = np.zeros((2, 8), np.uint8)
    lease = weakref.ref(view)
    hold_until_done(event, view)
    del view
    gc.collect()
    time.sleep(0.02)
    assert lease() is not None, "slot released while its GPU work was still queued"
    assert pending_holds() == 1
    assert len(_fence_threads()) == 1
    event.complete()
    deadline = time.monotonic() + 5.0
    while (lease() is not None or _fence_threads()) and time.monotonic() < deadline:
        time.sleep(0.005)
    assert lease() is None
    assert pending_holds() == 0
    assert _fence_threads() == [], "the fence thread outlived the work it watched"


def test_fences_cover_exactly_their_byte_ranges():
    fences = Fences()
    first, second = _GateEvent(), _GateEvent()
    fences.add(0, 100, first)
    fences.add(200, 300, second)
    assert fences.busy(50, 60)
    assert fences.busy(99, 201)
    assert not fences.busy(100, 200)
    first.complete()
    assert not fences.busy(0, 100)
    assert fences.busy(0, 1000)
    second.complete()
    fences.drain()
    assert not fences.busy(0, 1000)


@pytest.mark.parametrize("mode", GPU_MEMORY_MODES)
def test_gpu_slots_cannot_be_shared_with_worker_processes(mode, tmp_path):
    with pytest.raises(PlatformError, match=rf"memory_mode='{mode}' slots cannot be shared"):
        gpu_allocator(mode)(4096, True, str(tmp_path))


@no_cuda_only
@pytest.mark.parametrize("mode", GPU_MEMORY_MODES)
def test_slot_pool_in_a_gpu_mode_without_cuda_says_which_mode_works(mode):
    with pytest.raises(PlatformError, match=rf"memory_mode='{mode}' needs a CUDA device"):
        SlotPool((2, 8, 8, 3), count=2, mode=mode)


@pytest.mark.parametrize("mode", GPU_MEMORY_MODES)
def test_slot_pool_in_a_gpu_mode_refuses_process_sharing(mode, tmp_path):
    with pytest.raises(PlatformError, match=r"cannot be shared with worker processes"):
        SlotPool((2, 8, 8, 3), count=2, mode=mode, shared=True, shm_dir=str(tmp_path))
