"""ctypes access to the CUDA runtime library that torch already loaded.

torch covers streams, events and copies, but not mapped or managed host memory
(``cudaHostAlloc`` with the mapped flag, ``cudaHostGetDevicePointer``,
``cudaMallocManaged``) nor device attributes such as I/O coherency. Those calls go
through the very ``libcudart`` torch mapped into the process, so both share the
runtime's error state and the device's primary context; no extra dependency.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import re
import sys
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..errors import PlatformError

__all__ = ["ATTRIBUTES", "CudaRuntime", "cudart_candidates", "load_cudart"]

# cudaDeviceAttr values from the CUDA runtime's driver_types.h (stable since CUDA 9).
ATTRIBUTES = {
    "integrated": 18,
    "can_map_host_memory": 19,
    "compute_capability_major": 75,
    "compute_capability_minor": 76,
    "managed_memory": 83,
    "pageable_memory_access": 88,
    "concurrent_managed_access": 89,
    "host_register_supported": 99,
    "pageable_memory_access_uses_host_page_tables": 100,
}

HOST_ALLOC_PORTABLE = 0x01
HOST_ALLOC_MAPPED = 0x02
HOST_REGISTER_PORTABLE = 0x01
HOST_REGISTER_MAPPED = 0x02
MEM_ATTACH_GLOBAL = 0x01
MEM_ATTACH_HOST = 0x02
MEM_ATTACH_SINGLE = 0x04

# Where libcudart lives when it is not already mapped: a pip torch pulls NVIDIA's
# runtime wheel (site-packages/nvidia/cuda_runtime/lib), JetPack puts it under
# /usr/local/cuda, and some builds ship it inside torch/lib.
_STANDARD_DIRS = ("/usr/local/cuda/lib64", "/usr/local/cuda/targets/aarch64-linux/lib")

_SIGNATURES: dict[str, tuple[object, ...]] = {
    "cudaGetErrorString": (ctypes.c_int,),
    "cudaGetLastError": (),
    "cudaGetDevice": (ctypes.POINTER(ctypes.c_int),),
    "cudaDeviceGetAttribute": (ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_int),
    "cudaHostAlloc": (ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_uint),
    "cudaHostGetDevicePointer": (
        ctypes.POINTER(ctypes.c_void_p),
        ctypes.c_void_p,
        ctypes.c_uint,
    ),
    "cudaHostRegister": (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint),
    "cudaHostUnregister": (ctypes.c_void_p,),
    "cudaMallocManaged": (ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_uint),
    "cudaStreamAttachMemAsync": (
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_uint,
    ),
    "cudaFreeHost": (ctypes.c_void_p,),
    "cudaFree": (ctypes.c_void_p,),
}


class CudaRuntime:
    """The few CUDA runtime calls edgeload makes, each checked and turned into PlatformError.

    Args:
        lib: the loaded ``libcudart``.
        path: where it was loaded from (shown in messages).

    Raises:
        PlatformError: the library lacks one of the functions edgeload calls.
    """

    def __init__(self, lib: ctypes.CDLL, *, path: str) -> None:
        self.path = path
        self._lib = lib
        for name, argtypes in _SIGNATURES.items():
            try:
                fn = getattr(lib, name)
            except AttributeError as exc:
                raise PlatformError(
                    f"{path} has no {name}(): it is not a CUDA runtime library (libcudart); "
                    "point EDGELOAD_CUDART at the libcudart.so torch uses, or use "
                    "memory_mode='host'"
                ) from exc
            fn.argtypes = list(argtypes)
            fn.restype = ctypes.c_char_p if name == "cudaGetErrorString" else ctypes.c_int

    def _check(self, code: int, what: str) -> None:
        if code == 0:
            return
        # Clear the runtime's last error, or torch's next launch check reports it as its own.
        self._lib.cudaGetLastError()
        text = self._lib.cudaGetErrorString(code)
        detail = text.decode(errors="replace") if text else "unknown error"
        raise PlatformError(f"CUDA {what} failed: {detail} (cudaError {code})")

    def current_device(self) -> int:
        """The calling thread's CUDA device index."""
        out = ctypes.c_int()
        self._check(self._lib.cudaGetDevice(ctypes.byref(out)), "cudaGetDevice")
        return out.value

    def device_attribute(self, name: str, device: int) -> int:
        """One ``cudaDeviceAttr`` value, by its key in ATTRIBUTES."""
        out = ctypes.c_int()
        code = self._lib.cudaDeviceGetAttribute(ctypes.byref(out), ATTRIBUTES[name], device)
        self._check(code, f"cudaDeviceGetAttribute({name}, device {device})")
        return out.value

    def host_alloc(self, nbytes: int, *, mapped: bool) -> int:
        """Page-locked host memory; ``mapped`` also maps it into the GPU's address space."""
        ptr = ctypes.c_void_p()
        flags = HOST_ALLOC_PORTABLE | (HOST_ALLOC_MAPPED if mapped else 0)
        self._check(
            self._lib.cudaHostAlloc(ctypes.byref(ptr), nbytes, flags),
            f"cudaHostAlloc({nbytes} bytes, mapped={mapped})",
        )
        return _address(ptr)

    def host_device_pointer(self, host_ptr: int) -> int:
        """The GPU address of mapped host memory (equal to the host one under UVA)."""
        ptr = ctypes.c_void_p()
        code = self._lib.cudaHostGetDevicePointer(ctypes.byref(ptr), host_ptr, 0)
        self._check(code, "cudaHostGetDevicePointer")
        return _address(ptr)

    def host_register(self, host_ptr: int, nbytes: int, *, mapped: bool) -> None:
        """Page-lock (and optionally map) memory allocated elsewhere."""
        flags = HOST_REGISTER_PORTABLE | (HOST_REGISTER_MAPPED if mapped else 0)
        code = self._lib.cudaHostRegister(host_ptr, nbytes, flags)
        self._check(code, f"cudaHostRegister({nbytes} bytes, mapped={mapped})")

    def host_unregister(self, host_ptr: int) -> None:
        """Undo host_register()."""
        self._check(self._lib.cudaHostUnregister(host_ptr), "cudaHostUnregister")

    def malloc_managed(self, nbytes: int, *, attach_global: bool) -> int:
        """Unified memory; ``attach_global=False`` keeps it host-attached until a stream claims it."""
        ptr = ctypes.c_void_p()
        flags = MEM_ATTACH_GLOBAL if attach_global else MEM_ATTACH_HOST
        self._check(
            self._lib.cudaMallocManaged(ctypes.byref(ptr), nbytes, flags),
            f"cudaMallocManaged({nbytes} bytes)",
        )
        return _address(ptr)

    def stream_attach(self, stream: int, ptr: int, *, mode: str) -> None:
        """Attach managed memory: ``"single"`` (one stream's use), ``"global"`` or ``"host"``."""
        flags = {"single": MEM_ATTACH_SINGLE, "global": MEM_ATTACH_GLOBAL, "host": MEM_ATTACH_HOST}
        code = self._lib.cudaStreamAttachMemAsync(stream, ptr, 0, flags[mode])
        self._check(code, f"cudaStreamAttachMemAsync({mode})")

    def free_host(self, ptr: int) -> None:
        """Free memory from host_alloc()."""
        self._check(self._lib.cudaFreeHost(ptr), "cudaFreeHost")

    def free(self, ptr: int) -> None:
        """Free memory from malloc_managed()."""
        self._check(self._lib.cudaFree(ptr), "cudaFree")


def _address(ptr: ctypes.c_void_p) -> int:
    if not ptr.value:
        raise PlatformError("CUDA returned a null pointer without an error code")
    return int(ptr.value)


def _mapped_cudarts(maps_path: Path) -> list[str]:
    try:
        text = maps_path.read_text()
    except OSError:
        return []
    found: list[str] = []
    for line in text.splitlines():
        fields = line.split(maxsplit=5)
        path = fields[5].strip() if len(fields) == 6 else ""
        if os.path.basename(path).startswith("libcudart") and path not in found:
            found.append(path)
    return found


def _torch_dirs() -> list[str]:
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return []
    torch_dir = Path(next(iter(spec.submodule_search_locations)))
    return [str(torch_dir / "lib"), str(torch_dir.parent / "nvidia" / "cuda_runtime" / "lib")]


def _torch_cuda_version() -> str | None:
    torch = sys.modules.get("torch")
    version = getattr(getattr(torch, "version", None), "cuda", None)
    return str(version) if version else None


def _soname_major(path: str) -> int | None:
    match = re.search(r"libcudart[^/]*\.so\.(\d+)", path)
    return int(match.group(1)) if match else None


def cudart_candidates(
    *,
    search_dirs: Sequence[str] | None = None,
    maps_path: str = "/proc/self/maps",
    torch_cuda: str | None = None,
) -> list[str]:
    """The libcudart paths to try, best first.

    First ``EDGELOAD_CUDART``, then any libcudart already mapped into this process, then
    files in ``search_dirs`` (default: torch's lib dirs, NVIDIA's runtime wheel,
    /usr/local/cuda), then the linker's own search. Among those, libraries whose major
    version is torch's CUDA come first: with a statically linked torch, the first mapped
    libcudart may belong to another library (OpenCV, CuPy) and another CUDA release.

    Args:
        search_dirs: directories to look in instead of the default ones.
        maps_path: the process memory map to read (tests point it at a fixture).
        torch_cuda: torch's CUDA version (``"12.4"``); default ``torch.version.cuda``
            when torch is imported.
    """
    found: list[str] = []
    override = os.environ.get("EDGELOAD_CUDART")
    found += _mapped_cudarts(Path(maps_path))
    dirs: Iterable[str] = search_dirs if search_dirs is not None else _torch_dirs()
    if search_dirs is None:
        dirs = [*dirs, *_STANDARD_DIRS]
    for folder in dirs:
        found += sorted(glob.glob(os.path.join(folder, "libcudart*.so*")), reverse=True)
    if search_dirs is None:
        name = ctypes.util.find_library("cudart")
        if name:
            found.append(name)
    version = torch_cuda if torch_cuda is not None else _torch_cuda_version()
    if version:
        major = int(version.split(".")[0])
        # A stable sort: same-major libraries first, unknown majors next, others last.
        found.sort(key=lambda p: {major: 0, None: 1}.get(_soname_major(p), 2))
    return list(dict.fromkeys(([override] if override else []) + found))


_lock = threading.Lock()
_cached: CudaRuntime | None = None


def load_cudart(candidates: Sequence[str] | None = None) -> CudaRuntime:
    """Load the CUDA runtime (once per process when ``candidates`` is None).

    Args:
        candidates: paths to try in order; default cudart_candidates().

    Raises:
        PlatformError: no candidate loads as a CUDA runtime; the message lists each
            path tried and why it failed.
    """
    global _cached
    with _lock:
        if candidates is None and _cached is not None:
            return _cached
        paths = list(candidates) if candidates is not None else cudart_candidates()
        failures: list[str] = []
        for path in paths:
            try:
                runtime = CudaRuntime(ctypes.CDLL(path), path=path)
            except (OSError, PlatformError) as exc:
                failures.append(f"{path}: {exc}")
                continue
            if candidates is None:
                _cached = runtime
            return runtime
        tried = "; ".join(failures) if failures else "no libcudart found anywhere"
        raise PlatformError(
            f"cannot load the CUDA runtime library (libcudart): {tried}. "
            "Install a CUDA build of torch, set EDGELOAD_CUDART to libcudart's path, "
            "or use memory_mode='host'."
        )
