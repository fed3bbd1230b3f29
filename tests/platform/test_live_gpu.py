"""The live GPU facts, learnt without initialising CUDA (so fork stays possible).

A probe that called ``torch.cuda.get_device_properties`` initialised CUDA, after which
edgeload refuses ``fork``: DataLoader(multiprocessing_context="fork") failed on every
CUDA machine. The facts now come from files, NVML or a child process.
"""

from __future__ import annotations

import torch

# Internal: a Jetson's or a discrete GPU's files, NVML and torch build are injected here;
# a live probe() sees only this machine's.
from edgeload.platform._live import learn_gpu
from edgeload.platform._read import Reader
from edgeload.platform.facts import GpuInfo
from edgeload.platform.probe import probe

_NO_NVML = "/nonexistent/libnvidia-ml.so.1"


def _tree(tmp_path, files):
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return Reader(str(tmp_path))


def test_a_jetson_is_usable_when_its_gpu_node_exists(tmp_path):
    soc = GpuInfo(True, True, True, "Orin", "8.7", None)
    reader = _tree(tmp_path, {"dev/nvgpu/igpu0/ctrl": ""})
    gpu, note = learn_gpu(soc, reader, torch_cuda="12.2", nvml_library=_NO_NVML)
    assert note is None
    assert gpu.cuda_usable is True
    assert gpu.facts_from == "device tree + /dev/nvgpu/igpu0/ctrl"
    assert (gpu.name, gpu.compute_capability, gpu.io_coherent) == ("Orin", "8.7", True)
    gpu, _ = learn_gpu(soc, _tree(tmp_path / "bare", {}), torch_cuda="12.2")
    assert gpu.cuda_usable is False and gpu.facts_from == "device tree"


def test_a_discrete_gpu_without_nvml_is_read_from_the_drivers_files(tmp_path):
    seen = GpuInfo(True, False, None, "NVIDIA H200", None, None)
    reader = _tree(
        tmp_path, {"proc/driver/nvidia/gpus/0000:01:00.0/information": "Model: NVIDIA H200\n"}
    )
    gpu, _ = learn_gpu(seen, reader, torch_cuda="12.4", nvml_library=_NO_NVML)
    assert gpu.cuda_usable is True
    assert gpu.facts_from == "/proc/driver/nvidia"
    assert gpu.name == "NVIDIA H200"


def test_a_cpu_torch_is_not_usable_whatever_the_files_say(tmp_path):
    seen = GpuInfo(True, False, None, "NVIDIA H200", None, None)
    gpu, _ = learn_gpu(seen, _tree(tmp_path, {}), torch_cuda=None, nvml_library=_NO_NVML)
    assert gpu.cuda_usable is False
    assert gpu.facts_from == "torch build"


def test_a_live_probe_leaves_cuda_uninitialised():
    gpu = probe().gpu
    assert gpu.facts_from is not None
    assert not torch.cuda.is_initialized()
