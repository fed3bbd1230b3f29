"""GPU memory modes (pinned, mapped, managed), the fences that guard slot reuse, and transfers.

``HostEngine`` runs the same GPU code paths on CPU threads (see :mod:`.host_engine`).
"""

from .engine import CudaEngine
from .host_engine import HostEngine
from .status import CudaDevice, CudaStatus, check_memory_mode, cuda_device, cuda_status
from .transfer import DeviceCopier
from .zero_copy import as_cuda_tensor

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
