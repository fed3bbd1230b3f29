"""Whether this machine can give each GPU memory mode, and which one suits it.

The modes of the slot pool (``edgeload.pipeline.slots``):

- ``host``: page-aligned numpy memory; no GPU needed.
- ``pinned``: page-locked host memory, copied to the GPU asynchronously on a side
  stream (``edgeload.cuda.transfer``). For discrete GPUs.
- ``mapped``: page-locked and mapped into the GPU's address space; the GPU reads the
  bytes the decoder wrote, with no copy. For I/O-coherent Jetsons (Xavier, Orin),
  where such memory stays cached for the CPU.
- ``managed``: CUDA unified memory, for Jetsons without I/O coherency (Nano, TX2),
  where page-locked memory is uncached for the CPU and slow for the decoder to write.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, NamedTuple, cast

from .._deps import require_torch
from ..errors import MissingDependency, PlatformError, ProfileError
from ..vocabulary import GPU_MEMORY_MODES, MEMORY_MODES, MemoryMode
from . import _runtime as _cuda

__all__ = [
    "GPU_MEMORY_MODES",
    "MEMORY_MODES",
    "CudaDevice",
    "CudaStatus",
    "MemoryMode",
    "auto_memory_mode",
    "check_memory_mode",
    "cuda_device",
    "cuda_status",
    "resolve_memory_mode",
]


# Xavier (sm_72) is the first Jetson whose GPU snoops the CPU caches (one-way I/O
# coherency); Nano (sm_53) and TX2 (sm_62) are not coherent.
_IO_COHERENT_FROM = (7, 2)


class CudaStatus(NamedTuple):
    """Whether CUDA memory modes work here, and why (or why not)."""

    usable: bool
    """True when torch has CUDA, sees a device, and the CUDA runtime library loads."""
    reason: str
    """One line for a person: the device found, or what is missing."""


@dataclass(frozen=True)
class CudaDevice:
    """The memory-related properties of one CUDA device, as its runtime reports them."""

    index: int
    """The device index (``cuda:N``)."""
    name: str
    """The device name, e.g. ``Orin`` or ``NVIDIA H200``."""
    compute_capability: tuple[int, int]
    """(major, minor); Jetsons: Nano 5.3, TX2 6.2, Xavier 7.2, Orin 8.7."""
    integrated: bool
    """The GPU shares DRAM with the CPU (Jetson) rather than having its own."""
    can_map_host_memory: bool
    """``cudaHostAllocMapped`` works (needed by ``mapped``)."""
    managed_memory: bool
    """``cudaMallocManaged`` works (needed by ``managed``)."""
    concurrent_managed_access: bool
    """The CPU may touch managed memory while kernels run (false on every Jetson)."""
    pageable_memory_access: bool
    """The GPU can read ordinary pageable memory (HMM/ATS systems)."""
    uses_host_page_tables: bool
    """That access goes through the host's page tables (e.g. Grace Hopper)."""

    @property
    def io_coherent(self) -> bool:
        """The GPU sees the CPU's cached writes to mapped memory without a flush."""
        if not self.integrated:
            return True
        return self.compute_capability >= _IO_COHERENT_FROM

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON (``edgeload probe --json``)."""
        return {**asdict(self), "io_coherent": self.io_coherent}


def _torch_cuda_problem(torch: Any) -> str | None:
    version = torch.__version__
    if getattr(torch.version, "hip", None):
        return f"torch {version} is a ROCm build, not CUDA"
    if torch.version.cuda is None:
        return f"torch {version} has no CUDA"
    if not torch.cuda.is_available():
        return (
            f"torch {version} (CUDA {torch.version.cuda}) sees no usable CUDA device "
            f"(torch.cuda.device_count() = {torch.cuda.device_count()}; check the driver "
            "and CUDA_VISIBLE_DEVICES)"
        )
    return None


def cuda_status() -> CudaStatus:
    """Whether the CUDA memory modes (pinned, mapped, managed) can work on this machine.

    Never raises: a missing torch, a CPU-only torch, no device or no loadable CUDA
    runtime each give ``usable=False`` with the reason.
    """
    try:
        torch = require_torch()
    except MissingDependency as exc:
        return CudaStatus(False, f"torch is not importable ({exc})")
    problem = _torch_cuda_problem(torch)
    if problem is not None:
        return CudaStatus(False, problem)
    try:
        runtime = _cuda.load_cudart()
        device = cuda_device()
    except PlatformError as exc:
        return CudaStatus(False, str(exc))
    return CudaStatus(
        True,
        f"CUDA device {device.index}: {device.name} (sm_{device.compute_capability[0]}"
        f"{device.compute_capability[1]}, {'integrated' if device.integrated else 'discrete'}), "
        f"torch {torch.__version__}, runtime {runtime.path}",
    )


def cuda_device(index: int | None = None) -> CudaDevice:
    """Read the memory properties of a CUDA device.

    Args:
        index: the device; default the current one.

    Raises:
        PlatformError: torch has no CUDA, there is no device, or libcudart cannot load.
    """
    torch = require_torch()
    problem = _torch_cuda_problem(torch)
    if problem is not None:
        raise PlatformError(f"no CUDA device to query: {problem}")
    torch.cuda.init()  # the runtime calls below must share torch's primary context
    runtime = _cuda.load_cudart()
    device = runtime.current_device() if index is None else index

    def flag(name: str) -> bool:
        return bool(runtime.device_attribute(name, device))

    return CudaDevice(
        index=device,
        name=str(torch.cuda.get_device_name(device)),
        compute_capability=(
            runtime.device_attribute("compute_capability_major", device),
            runtime.device_attribute("compute_capability_minor", device),
        ),
        integrated=flag("integrated"),
        can_map_host_memory=flag("can_map_host_memory"),
        managed_memory=flag("managed_memory"),
        concurrent_managed_access=flag("concurrent_managed_access"),
        pageable_memory_access=flag("pageable_memory_access"),
        uses_host_page_tables=flag("pageable_memory_access_uses_host_page_tables"),
    )


def auto_memory_mode() -> tuple[MemoryMode, str]:
    """The memory mode this machine should use, with the reason.

    I/O-coherent Jetson -> mapped; non-coherent Jetson -> managed; discrete GPU ->
    pinned; no usable CUDA -> host. Never raises.
    """
    status = cuda_status()
    if not status.usable:
        return "host", f"no CUDA: {status.reason}"
    try:
        device = cuda_device()
    except PlatformError as exc:
        return "host", f"CUDA device unreadable: {exc}"
    if not device.integrated:
        return "pinned", f"discrete GPU {device.name}: page-locked slots, async copy"
    if device.io_coherent and device.can_map_host_memory:
        return "mapped", f"I/O-coherent integrated GPU {device.name}: zero-copy mapped slots"
    if device.managed_memory:
        return "managed", (
            f"integrated GPU {device.name} without I/O coherency: pinned memory is "
            "uncached for the CPU, so slots use unified memory"
        )
    return "pinned", f"integrated GPU {device.name} without mapped or managed memory"


def _unknown_mode(mode: object) -> ProfileError:
    names = ", ".join(repr(m) for m in ("auto", *MEMORY_MODES))
    return ProfileError(f"memory_mode must be one of {names}, got {mode!r}")


def check_memory_mode(mode: str) -> None:
    """Raise unless this machine can give the memory mode ``mode``.

    Args:
        mode: one of MEMORY_MODES.

    Raises:
        ProfileError: ``mode`` is not a memory mode.
        PlatformError: the mode needs CUDA (or a device feature) this machine lacks;
            the message says why and which mode would work.
    """
    if mode not in MEMORY_MODES:
        raise _unknown_mode(mode)
    if mode == "host":
        return
    status = cuda_status()
    if not status.usable:
        raise PlatformError(
            f"memory_mode={mode!r} needs a CUDA device; {status.reason}. "
            "Use memory_mode='host' (or 'auto')."
        )
    device = cuda_device()
    if mode == "mapped" and not device.can_map_host_memory:
        raise PlatformError(
            f"memory_mode='mapped' needs mapped host memory, which {device.name} cannot "
            "map; use memory_mode='pinned' (or 'auto')."
        )
    if mode == "managed" and not device.managed_memory:
        raise PlatformError(
            f"memory_mode='managed' needs CUDA managed memory, which {device.name} lacks; "
            "use memory_mode='pinned' (or 'auto')."
        )


def resolve_memory_mode(mode: str) -> tuple[MemoryMode, str]:
    """Turn a user's ``memory_mode`` (``"auto"`` or a mode) into a mode and its reason.

    Args:
        mode: ``"auto"`` or one of MEMORY_MODES.

    Raises:
        ProfileError: ``mode`` is not a memory mode.
        PlatformError: an explicit mode this machine cannot give (see check_memory_mode).
    """
    if mode == "auto":
        return auto_memory_mode()
    check_memory_mode(mode)
    return cast(MemoryMode, mode), "asked for explicitly"
