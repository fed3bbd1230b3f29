"""The facts a probe returns: frozen, JSON-ready dataclasses, and nothing that reads files.

Kept apart from :mod:`edgeload.platform.probe` so the modules it calls (``_live``,
``_boards``) build these types without importing the probe that calls them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "CpuCluster",
    "CpuInfo",
    "Family",
    "GpuInfo",
    "MemoryInfo",
    "OpenCVInfo",
    "PiRevision",
    "Platform",
]

Family = Literal["jetson", "raspberry_pi", "arm", "x86"]


def _plain(value: Any) -> Any:
    """Dataclasses, tuples and lists as JSON-ready dicts and lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (tuple, list)):
        return [_plain(item) for item in value]
    return value


@dataclass(frozen=True)
class CpuCluster:
    """CPUs of one core type and one maximum frequency (and package, where known)."""

    core_type: str
    """Core name: ``"Cortex-A78AE"``, ``"Carmel"``, an x86 model name, or ``"unknown"``."""
    count: int
    """Number of online CPUs in the cluster."""
    cpus: tuple[int, ...]
    """Their logical CPU ids, ascending."""
    max_mhz: float | None
    """``cpufreq/cpuinfo_max_freq`` in MHz, or None when cpufreq is not exposed."""


@dataclass(frozen=True)
class CpuInfo:
    """Online and usable CPUs."""

    online_count: int
    """CPUs online (``sys/devices/system/cpu/online``, else ``possible``, else cpuinfo); >= 1."""
    online: tuple[int, ...]
    """Their ids; not contiguous where cores are off (TX2 with Denver off: 0, 3, 4, 5)."""
    clusters: tuple[CpuCluster, ...]
    """Online CPUs grouped by core type, max frequency and physical package."""
    usable_count: int
    """CPUs this process may keep busy: affinity/cpuset and cgroup quota, rounded up; >= 1."""
    affinity_count: int | None
    """CPUs in the affinity mask (live) or cgroup cpuset (fixture), None when unknown."""
    quota_cpus: float | None
    """cgroup CPU quota in CPUs (``cpu.max`` 150000/100000 -> 1.5), None when unlimited."""
    model_name: str | None
    """cpuinfo ``model name`` (x86: the CPU product name), None when absent."""


@dataclass(frozen=True)
class MemoryInfo:
    """RAM, cgroup limit, shared memory and swap, in bytes (None: unknown)."""

    total_bytes: int | None
    """``MemTotal``; on a Jetson the GPU shares it."""
    available_bytes: int | None
    """``MemAvailable`` at probe time."""
    limit_bytes: int | None
    """cgroup memory limit (v2 ``memory.max``, v1 ``memory.limit_in_bytes``); None: none."""
    limit_used_bytes: int | None
    """cgroup memory usage counted against that limit, when a limit is set."""
    shm_bytes: int | None
    """Size of ``/dev/shm`` (live: statvfs; otherwise the tmpfs ``size=`` in mounts)."""
    swap_bytes: int | None
    """``SwapTotal``."""
    zram: bool | None
    """Whether swap is on zram (``proc/swaps``), None when ``proc/swaps`` is unreadable."""
    zram_bytes: int | None
    """Total size of zram swap devices."""

    @property
    def usable_bytes(self) -> int | None:
        """Memory this process can still take: available RAM, capped by the cgroup headroom."""
        headroom = None
        if self.limit_bytes is not None:
            headroom = max(0, self.limit_bytes - (self.limit_used_bytes or 0))
        if self.available_bytes is None:
            return headroom
        return self.available_bytes if headroom is None else min(self.available_bytes, headroom)


@dataclass(frozen=True)
class GpuInfo:
    """The CUDA GPU, if any."""

    present: bool
    """A CUDA-capable NVIDIA GPU is known to exist (every Jetson; a discrete NVIDIA card)."""
    integrated: bool | None
    """The GPU shares DRAM with the CPU (all Jetsons)."""
    io_coherent: bool | None
    """Pinned host memory stays CPU-cached (Xavier, Orin: CC >= 7.2). Nano/TX1/TX2: False."""
    name: str | None
    """GPU name (torch's, when live; otherwise from the SoC)."""
    compute_capability: str | None
    """``"8.7"`` style."""
    cuda_usable: bool | None
    """``torch.cuda.is_available()`` on a live probe; None when not asked."""
    memory_bytes: int | None = None
    """Device memory reported by torch (live only)."""
    facts_from: str | None = None
    """Where a live probe learnt ``cuda_usable`` and the rest, without initialising
    CUDA: ``"device tree ..."``, ``"NVML"``, ``"/proc/driver/nvidia"``, ``"torch"``
    (CUDA was already initialised), ``"torch in a child process"``, ``"torch build"``."""


@dataclass(frozen=True)
class OpenCVInfo:
    """The importable ``cv2`` and what its build can decode with (live probe only)."""

    version: str
    """``cv2.__version__``."""
    path: str
    """Where ``cv2`` was imported from."""
    ffmpeg: bool
    """Built with the FFmpeg video I/O backend."""
    gstreamer: bool
    """Built with GStreamer: needed for hardware decode pipelines (JetPack's build has it)."""
    cuda: bool
    """Built with CUDA modules."""
    shadows_system: bool
    """A pip ``cv2`` is imported although a system one (JetPack, Debian) also exists."""
    system_path: str | None
    """That system ``cv2``, when one exists."""


@dataclass(frozen=True)
class PiRevision:
    """A Raspberry Pi revision code, decoded (new-style layout ``NOQuuuWuFMMMCCCCPPPPTTTTTTTTRRRR``)."""

    code: str
    """Lowercase hex as in cpuinfo: ``"d03114"``."""
    model: str
    """Short model name as Raspberry Pi's documentation writes it: ``"4B"``, ``"Zero 2 W"``."""
    ram_mb: int | None
    """RAM fitted at the factory, in MiB."""
    manufacturer: str
    """``"Sony UK"``, ``"Embest"``, ...; ``"unknown"`` for a code not in the table."""
    processor: str
    """SoC: ``"BCM2711"``. Trust this, not cpuinfo's ``Hardware`` line."""
    revision: str
    """Board revision: ``"1.4"``."""


@dataclass(frozen=True)
class Platform:
    """What the device is: board, CPU, memory, GPU and OpenCV facts. Pure data."""

    family: Family
    """``"jetson"``, ``"raspberry_pi"``, ``"arm"`` (other ARM boards) or ``"x86"``."""
    model: str
    """Human name, from the module id or Pi revision where known, else the DT model."""
    model_reported: str | None
    """The model string as the device reports it (DT ``model``, cpuinfo ``Model``, DMI)."""
    soc: str | None
    """``"tegra234"``, ``"BCM2711"``, the last DT ``compatible`` entry's chip, or None."""
    board_id: str | None
    """Jetson module id (``"p3767-0005"``); None elsewhere."""
    carrier_id: str | None
    """Jetson carrier board id (``"p3768-0000"``), when the DT names one."""
    compatible: tuple[str, ...]
    """Device-tree ``compatible`` entries, most specific first."""
    l4t_release: str | None
    """Jetson Linux release from ``etc/nv_tegra_release``: ``"36.4.3"``."""
    pi_revision: PiRevision | None
    """The decoded revision code on a Raspberry Pi (cpuinfo ``Revision`` or the DT)."""
    machine: str
    """uname-style architecture: ``aarch64``, ``armv7l``, ``x86_64`` or ``"unknown"``."""
    kernel_release: str | None
    """``proc/sys/kernel/osrelease`` (live: uname)."""
    in_container: bool
    """Docker/Podman/LXC/Kubernetes evidence found (the file is named in ``notes``)."""
    cpu: CpuInfo
    memory: MemoryInfo
    gpu: GpuInfo
    opencv: OpenCVInfo | None
    """Only a live probe imports cv2; None for fixture roots or when cv2 is absent."""
    root: str
    """The root that was read."""
    live: bool
    """Whether running-process facts (affinity, torch, cv2) were consulted."""
    notes: tuple[str, ...] = field(default=())
    """Why some facts are unknown or were inferred, one line each."""
    hw_decoders: tuple[str, ...] = field(default=())
    """GStreamer hardware decoder elements whose plugin and device files exist under root
    (``nvv4l2decoder``, ``v4l2h264dec``, ...). A hint: OpenCV must also have GStreamer."""
    power_mode: str | None = None
    """Jetson power mode (``"MAXN (0)"``, ``"15W (2)"``) from ``nvpmodel``; None elsewhere."""

    @property
    def unsupported(self) -> str | None:
        """Why edgeload does not support this board's software, or None.

        JetPack 4 (L4T R32: Python 3.6, CUDA 10.2) is below the oldest stack edgeload
        runs on (JetPack 5: Python 3.8).  A Tegra X1 or X2 board never gets a newer
        JetPack, so it is named even where its release file is missing.
        """
        major = (self.l4t_release or "").split(".")[0]
        jetpack4_only = self.soc in _JETPACK4_ONLY_SOCS
        if self.family != "jetson" or not (major == "32" or (not major and jetpack4_only)):
            return None
        release = f"L4T R{self.l4t_release}" if self.l4t_release else "L4T R32"
        board = f"; a {self.soc} board cannot run them" if jetpack4_only else ""
        return (
            f"this board's JetPack ({release}, JetPack 4) is not supported; JetPack 5 or 6 "
            f"is needed{board}"
        )

    def to_dict(self) -> dict[str, Any]:
        """The platform as plain JSON-serialisable data (tuples become lists)."""
        result: dict[str, Any] = _plain(self)
        return result


# Tegra X1 (Nano, TX1) and X2 (TX2): JetPack 4.6 is their last release.
_JETPACK4_ONLY_SOCS = ("tegra210", "tegra186")
