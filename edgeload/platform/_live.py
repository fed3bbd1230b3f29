"""Facts only a running process can give: torch's CUDA device and OpenCV's build.

Both imports are guarded: a missing module, a broken CUDA install or a warning at
import must leave the fact unknown, never fail the probe.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import re
import sys
import sysconfig
import warnings
from typing import Any

from ._read import Reader
from .facts import GpuInfo, OpenCVInfo


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


def ask_torch(gpu: GpuInfo) -> tuple[GpuInfo, str | None]:
    """``gpu`` updated with what torch sees, and a note when torch could not tell."""
    torch = _import("torch")
    if torch is None:
        return gpu, "torch not importable: CUDA usability unknown"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            usable = bool(torch.cuda.is_available())
            if not usable:
                return dataclasses.replace(gpu, cuda_usable=False), None
            props = torch.cuda.get_device_properties(0)
    except Exception as exc:
        return dataclasses.replace(gpu, cuda_usable=False), f"torch.cuda failed: {exc}"
    integrated = getattr(props, "is_integrated", None)
    cc = f"{props.major}.{props.minor}"
    io_coherent = gpu.io_coherent
    if integrated:
        io_coherent = (props.major, props.minor) >= (7, 2)
    return (
        dataclasses.replace(
            gpu,
            present=True,
            integrated=bool(integrated) if integrated is not None else gpu.integrated,
            io_coherent=io_coherent,
            name=str(props.name),
            compute_capability=cc,
            cuda_usable=True,
            memory_bytes=int(props.total_memory),
        ),
        None,
    )


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
