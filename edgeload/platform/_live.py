"""Facts only a running process can give: torch's CUDA device, NVML's GPU and OpenCV's build.

Both imports are guarded: a missing module, a broken CUDA install or a warning at
import must leave the fact unknown, never fail the probe.

NVIDIA's management library (NVML) says what GPU 0 is without touching CUDA: NVML
talks to the driver, not to a CUDA context, so asking it leaves the process free to
``fork`` workers afterwards; ``torch.cuda.get_device_properties`` would not.
"""

from __future__ import annotations

import ctypes
import dataclasses
import importlib
import json
import os
import re
import subprocess
import sys
import sysconfig
import warnings
from typing import Any, NamedTuple

from ._read import Reader
from .facts import GpuInfo, OpenCVInfo

__all__ = [
    "NvmlGpu",
    "ask_opencv",
    "ask_torch",
    "first_visible_gpu",
    "learn_gpu",
    "nvidia_gpu_evidence",
]


def _import(name: str) -> Any:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return importlib.import_module(name)
    except Exception:  # a broken install raises OSError/RuntimeError, not only ImportError
        return None


def nvidia_gpu_evidence(reader: Reader) -> bool:
    """Files an NVIDIA driver leaves: a discrete GPU (or WSL's GPU bridge)."""
    return bool(reader.listdir("proc/driver/nvidia/gpus")) or any(
        reader.exists(p) for p in ("dev/nvidia0", "dev/nvgpu", "dev/dxg")
    )


# Jetson GPU device nodes: nvhost (L4T up to 35) and nvgpu (L4T 36).
_JETSON_GPU_NODES = ("dev/nvhost-ctrl-gpu", "dev/nvgpu/igpu0/ctrl")

# Asking torch in a child process costs an interpreter start and a CUDA init (seconds):
# the last resort, bounded.
_CHILD_TIMEOUT_S = 60.0
_CHILD_SCRIPT = (
    "import json, torch\n"
    "p = torch.cuda.get_device_properties(0)\n"
    "print(json.dumps({'name': p.name, 'major': p.major, 'minor': p.minor,"
    " 'memory': p.total_memory, 'integrated': bool(getattr(p, 'is_integrated', False))}))\n"
)


def ask_torch(gpu: GpuInfo, reader: Reader | None = None) -> tuple[GpuInfo, str | None]:
    """``gpu`` updated with what CUDA would report, and a note when that is unknown.

    CUDA is never initialised here: a process that has not used CUDA yet may still fork
    workers after probing. Where the facts come from is kept in ``facts_from``: the
    device tree (Jetson), NVML, the driver's /proc files, torch itself (only when the
    program had already initialised CUDA), or torch in a child process.
    """
    torch = _import("torch")
    if torch is None:
        return gpu, "torch not importable: CUDA usability unknown"
    try:
        if torch.cuda.is_initialized():  # already paid for: asking adds nothing
            return _from_props(gpu, torch.cuda.get_device_properties(0), "torch"), None
    except Exception as exc:
        return dataclasses.replace(gpu, cuda_usable=False), f"torch.cuda failed: {exc}"
    reader = reader if reader is not None else Reader("/")
    return learn_gpu(gpu, reader, torch_cuda=getattr(torch.version, "cuda", None))


def learn_gpu(
    gpu: GpuInfo,
    reader: Reader,
    *,
    torch_cuda: str | None,
    nvml_library: str = "libnvidia-ml.so.1",
) -> tuple[GpuInfo, str | None]:
    """The CUDA facts a process that has not initialised CUDA can learn (see ask_torch).

    Args:
        gpu: what the files under the probe root said.
        reader: the probe root (device nodes, the driver's /proc files).
        torch_cuda: ``torch.version.cuda`` (None: a CPU or ROCm build).
        nvml_library: NVML's library name (tests point it elsewhere).
    """
    if torch_cuda is None:
        return dataclasses.replace(gpu, cuda_usable=False, facts_from="torch build"), None
    if gpu.integrated:
        nodes = [p for p in _JETSON_GPU_NODES if reader.exists(p)]
        source = "device tree" + (f" + /{nodes[0]}" if nodes else "")
        return dataclasses.replace(gpu, cuda_usable=bool(nodes), facts_from=source), None
    found = first_visible_gpu(nvml_library)
    if found is not None:
        return (
            dataclasses.replace(
                gpu,
                present=gpu.present or found.visible > 0,
                integrated=False if found.visible else gpu.integrated,
                name=found.name or gpu.name,
                compute_capability=found.compute_capability or gpu.compute_capability,
                memory_bytes=found.memory_bytes or gpu.memory_bytes,
                cuda_usable=found.visible > 0,
                facts_from="NVML",
            ),
            None,
        )
    if reader.listdir("proc/driver/nvidia/gpus"):
        # The driver's files give the model, not the compute capability: enough for a plan.
        return dataclasses.replace(gpu, cuda_usable=True, facts_from="/proc/driver/nvidia"), None
    if gpu.present:
        return _ask_child(gpu)
    return dataclasses.replace(gpu, cuda_usable=False, facts_from="no NVIDIA driver files"), None


def _from_props(gpu: GpuInfo, props: Any, source: str) -> GpuInfo:
    integrated = getattr(props, "is_integrated", None)
    io_coherent = gpu.io_coherent
    if integrated:
        io_coherent = (props.major, props.minor) >= (7, 2)
    return dataclasses.replace(
        gpu,
        present=True,
        integrated=bool(integrated) if integrated is not None else gpu.integrated,
        io_coherent=io_coherent,
        name=str(props.name),
        compute_capability=f"{props.major}.{props.minor}",
        cuda_usable=True,
        memory_bytes=int(props.total_memory),
        facts_from=source,
    )


class _Props:
    def __init__(self, facts: dict[str, Any]) -> None:
        self.name, self.major, self.minor = facts["name"], facts["major"], facts["minor"]
        self.total_memory, self.is_integrated = facts["memory"], facts["integrated"]


def _ask_child(gpu: GpuInfo) -> tuple[GpuInfo, str | None]:
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CHILD_SCRIPT],
            capture_output=True,
            text=True,
            timeout=_CHILD_TIMEOUT_S,
        )
        facts = json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError, KeyError) as exc:
        return dataclasses.replace(gpu, cuda_usable=False), f"torch.cuda in a child failed: {exc}"
    return _from_props(gpu, _Props(facts), "torch in a child process"), None


def _build_flag(info: str, label: str) -> bool:
    match = re.search(rf"^\s*{label}:\s*(\S+)", info, re.MULTILINE | re.IGNORECASE)
    return match is not None and match.group(1).upper() == "YES"


def _system_cv2(reader: Reader) -> str | None:
    """A cv2 that a distribution (Debian, JetPack) installed for this Python version."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    dirs = [
        "usr/lib/python3/dist-packages",
        f"usr/lib/python{version}/dist-packages",
        f"usr/local/lib/python{version}/dist-packages",
    ]
    for rel in dirs:
        for name in reader.listdir(rel):
            path = reader.resolve(f"{rel}/{name}")
            if path is None:
                continue
            if name == "cv2" and os.path.isdir(path):
                return path
            if name in ("cv2.so", f"cv2{suffix}"):
                return path
    return None


def ask_opencv(reader: Reader) -> OpenCVInfo | None:
    """The importable cv2's version and build facts, or None when cv2 is absent."""
    cv2 = _import("cv2")
    if cv2 is None:
        return None
    try:
        info = str(cv2.getBuildInformation())
    except Exception:
        info = ""
    path = os.path.realpath(str(getattr(cv2, "__file__", "") or ""))
    system = _system_cv2(reader)
    shadows = False
    if system is not None and path:
        system_real = os.path.realpath(system)
        system_dir = system_real if os.path.isdir(system_real) else os.path.dirname(system_real)
        shadows = not path.startswith(system_dir + os.sep) and path != system_real
    return OpenCVInfo(
        version=str(getattr(cv2, "__version__", "unknown")),
        path=path,
        ffmpeg=_build_flag(info, "FFMPEG"),
        gstreamer=_build_flag(info, "GStreamer"),
        cuda=_build_flag(info, "NVIDIA CUDA"),
        shadows_system=shadows,
        system_path=system,
    )


class NvmlGpu(NamedTuple):
    """One GPU as NVML reports it."""

    name: str
    compute_capability: str
    memory_bytes: int
    visible: int
    """GPUs this process may use (CUDA_VISIBLE_DEVICES applied)."""


class _Memory(ctypes.Structure):
    _fields_ = [
        ("total", ctypes.c_ulonglong),
        ("free", ctypes.c_ulonglong),
        ("used", ctypes.c_ulonglong),
    ]


def _visible(count: int) -> list[int]:
    """NVML indices CUDA will show, in order (CUDA_VISIBLE_DEVICES by index only)."""
    setting = os.environ.get("CUDA_VISIBLE_DEVICES")
    if setting is None:
        return list(range(count))
    out: list[int] = []
    for part in setting.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) >= count:
            break  # CUDA stops at the first invalid entry; UUIDs count as unknown here
        out.append(int(part))
    return out


def first_visible_gpu(library: str = "libnvidia-ml.so.1") -> NvmlGpu | None:
    """GPU 0 as CUDA would number it, or None when NVML is absent or says nothing."""
    try:
        nvml = ctypes.CDLL(library)
    except OSError:
        return None
    if nvml.nvmlInit_v2() != 0:
        return None
    try:
        count = ctypes.c_uint()
        if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            return None
        visible = _visible(count.value)
        if not visible:
            return NvmlGpu("", "", 0, 0)
        handle = ctypes.c_void_p()
        if nvml.nvmlDeviceGetHandleByIndex_v2(visible[0], ctypes.byref(handle)) != 0:
            return None
        name = ctypes.create_string_buffer(96)
        nvml.nvmlDeviceGetName(handle, name, ctypes.c_uint(96))
        major, minor = ctypes.c_int(), ctypes.c_int()
        cc = ""
        if (
            nvml.nvmlDeviceGetCudaComputeCapability(
                handle, ctypes.byref(major), ctypes.byref(minor)
            )
            == 0
        ):
            cc = f"{major.value}.{minor.value}"
        memory = _Memory()
        total = 0
        if nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory)) == 0:
            total = int(memory.total)
        return NvmlGpu(name.value.decode(errors="replace"), cc, total, len(visible))
    finally:
        nvml.nvmlShutdown()
