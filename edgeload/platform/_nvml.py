"""What NVIDIA's management library (NVML) says about GPU 0, without touching CUDA.

NVML talks to the driver, not to a CUDA context, so asking it leaves the process free to
``fork`` workers afterwards; ``torch.cuda.get_device_properties`` would not.
"""

from __future__ import annotations

import ctypes
import os
from typing import NamedTuple

__all__ = ["NvmlGpu", "first_visible_gpu"]


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
