"""GPU memory modes (pinned, mapped, managed), the fences that guard slot reuse, and transfers."""

from .memory import as_cuda_tensor
from .status import CudaDevice, CudaStatus, check_memory_mode, cuda_device, cuda_status
from .transfer import DeviceCopier

__all__ = [
    "CudaDevice",
    "CudaStatus",
    "DeviceCopier",
    "as_cuda_tensor",
    "check_memory_mode",
    "cuda_device",
    "cuda_status",
]
