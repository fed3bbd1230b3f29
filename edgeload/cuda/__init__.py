"""GPU memory modes (pinned, mapped, managed), the fences that guard slot reuse, and transfers.

``HostEngine`` runs the same GPU code paths on CPU threads (see :mod:`.host_engine`).

The names below load on first use: a loader whose slots stay in host memory imports
only :mod:`.slot_mode` from here, not the CUDA runtime, engines and copier (about
0.37 MiB of anonymous memory for a two-thread DataLoader run on x86).
"""

from typing import TYPE_CHECKING, Any, List

from .._lazy import load_name

_LAZY = {
    "CudaEngine": ".engine",
    "HostEngine": ".host_engine",
    "CudaDevice": ".status",
    "CudaStatus": ".status",
    "check_memory_mode": ".status",
    "cuda_device": ".status",
    "cuda_status": ".status",
    "DeviceCopier": ".transfer",
    "as_cuda_tensor": ".memory",
}

if TYPE_CHECKING:
    from .engine import CudaEngine
    from .host_engine import HostEngine
    from .memory import as_cuda_tensor
    from .status import CudaDevice, CudaStatus, check_memory_mode, cuda_device, cuda_status
    from .transfer import DeviceCopier


def __getattr__(name: str) -> Any:
    return load_name(__name__, _LAZY, globals(), name)


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "CudaDevice",
    "CudaEngine",
    "CudaStatus",
    "DeviceCopier",
    "HostEngine",
    "as_cuda_tensor",
    "check_memory_mode",
    "cuda_device",
    "cuda_status",
]
