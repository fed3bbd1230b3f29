"""What this device is: read once from a root path, returned as frozen data.

``probe(root)`` reads only files under ``root`` (``proc/cpuinfo``, ``etc/nv_tegra_release``,
the device tree, ``sys/devices/system/cpu``, cgroup files ...), so tests point it at a
fixture tree. Only a live probe (``root="/"``) also asks the running process: CPU
affinity, torch's CUDA device and OpenCV's build. Nothing here makes decisions; a
missing or garbled file turns the facts it would give into ``None`` (or ``"unknown"``)
and a line in :attr:`Platform.notes`, never an exception.

:func:`collect` assembles the :class:`Platform`, in this order:

- which board this is (:func:`identify`: family, model, SoC, module ids). Order of
  trust: DT ``compatible`` (module ids do not drift between JetPack releases, model
  strings do), then the DT ``model``, then files that survive inside containers
  (``etc/nv_tegra_release``, ``sys/devices/soc0``, cpuinfo core types);
- CPU and memory facts from ``proc`` and ``sys`` files (online CPUs, clusters,
  meminfo, zram, ``/dev/shm``, hardware decoders);
- container limits (:mod:`._cgroup`) and, on a live probe, torch and OpenCV
  (:mod:`._live`);
- the Jetson power mode (nvpmodel): how many cores and what clocks the board runs at.
  A tuned profile is measured at one power mode; ``edgeload autotune`` stamps it and
  :func:`edgeload.platform.profile.load_profile` warns when the device now runs another.

Files are read through :class:`~edgeload.platform._read.Reader`, which never raises.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Protocol, cast

from ..errors import PlatformError
from . import _boards as boards
from . import _cgroup as cgroup
from . import _live as live_facts
from ._boards import CORE_NAMES
from ._read import Reader, parse_cpu_list, parse_cpuinfo, parse_kb_table
from .facts import (
    CpuCluster,
    CpuInfo,
    Family,
    GpuInfo,
    MemoryInfo,
    OpenCVInfo,
    PiRevision,
    Platform,
)

__all__ = [
    "CpuCluster",
    "CpuInfo",
    "GpuInfo",
    "MemoryInfo",
    "OpenCVInfo",
    "PiRevision",
    "Platform",
    "probe",
]


class _ProbeFunction(Protocol):
    """``probe``'s type: the function plus ``cache_clear()`` for the cached live result."""

    def __call__(
        self, root: str | os.PathLike[str] = "/", *, live: bool | None = None
    ) -> Platform: ...

    def cache_clear(self) -> None: ...


def _probe(root: str | os.PathLike[str] = "/", *, live: bool | None = None) -> Platform:
    """Read what this device is.

    Args:
        root: filesystem root to read ``proc/``, ``sys/``, ``etc/`` from; a fixture tree
            in tests. Default ``"/"``.
        live: also ask the running process (affinity, torch CUDA, cv2). Defaults to
            ``root == "/"``. Live results are cached; ``probe.cache_clear()`` forgets them.

    Raises:
        PlatformError: ``root`` is not a directory. Missing or garbled files under it
            never raise; they leave the facts unknown and add a line to ``notes``.
    """
    root_str = os.fspath(root)
    if live is None:
        live = os.path.realpath(root_str) == os.path.realpath("/")
    if live:
        return _probe_cached(root_str)
    return _probe_uncached(root_str, live=False)


@functools.lru_cache(maxsize=4)
def _probe_cached(root: str) -> Platform:
    return _probe_uncached(root, live=True)


def _probe_uncached(root: str, *, live: bool) -> Platform:
    return collect(root, live=live)


_probe.cache_clear = _probe_cached.cache_clear  # type: ignore[attr-defined]
_probe.__name__ = _probe.__qualname__ = "probe"
probe = cast("_ProbeFunction", _probe)


def _gpu(board: Board, reader: Reader) -> GpuInfo:
    if board.family == "jetson":
        soc = boards.TEGRA_SOCS.get(board.soc or "")
        cc = soc.compute_capability if soc else None
        # CUDA for Tegra: pinned memory is CPU-cached (I/O coherent) from Xavier (7.2) on.
        coherent = None if cc is None else tuple(map(int, cc.split("."))) >= (7, 2)
        return GpuInfo(True, True, coherent, soc.gpu if soc else None, cc, None)
    if live_facts.nvidia_gpu_evidence(reader):
        name = None
        for bus in reader.listdir("proc/driver/nvidia/gpus")[:1]:
            info = reader.read_text(f"proc/driver/nvidia/gpus/{bus}/information") or ""
            lines = [
                ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("Model:")
            ]
            name = lines[0] if lines else None
        return GpuInfo(True, False, None, name, None, None)
    return GpuInfo(False, None, None, None, None, None)


def _memory(
    reader: Reader, limits: cgroup.CgroupLimits, notes: list[str], *, live: bool
) -> MemoryInfo:
    mem = memory_facts(reader)
    if mem["total"] is None:
        notes.append("proc/meminfo missing or unreadable: RAM unknown")
    zram, zram_bytes = zram_swap(reader)
    return MemoryInfo(
        total_bytes=mem["total"],
        available_bytes=mem["available"],
        limit_bytes=limits.memory_limit,
        limit_used_bytes=limits.memory_used,
        shm_bytes=shm_size(reader, live=live, total=mem["total"]),
        swap_bytes=mem["swap"],
        zram=zram,
        zram_bytes=zram_bytes,
    )


def collect(root: str, *, live: bool) -> Platform:
    """Read every fact under ``root``; see :func:`edgeload.platform.probe.probe`."""
    if not os.path.isdir(root):
        raise PlatformError(
            f"probe root {root!r} is not a directory; pass the root of a device's "
            "filesystem (default '/') or a fixture tree"
        )
    reader = Reader(root)
    notes: list[str] = []
    per_cpu, glob_fields = parse_cpuinfo(reader.read_text("proc/cpuinfo"))
    if not per_cpu:
        notes.append("proc/cpuinfo missing or unreadable: core types unknown")
    online, online_source = online_cpus(reader, per_cpu)
    if not online and live:
        online, online_source = tuple(range(os.cpu_count() or 1)), "os.cpu_count()"
    if online_source != f"{CPU_DIR}/online":
        notes.append(f"online CPUs read from {online_source}")
    cpu_clusters = clusters(reader, online, per_cpu)
    cpu_model = next((f["model name"] for f in per_cpu.values() if "model name" in f), None)
    machine = os.uname().machine if live else machine_from_cpuinfo(per_cpu, glob_fields)
    seen = Seen(
        reader=reader,
        machine=machine or "unknown",
        compatible=dt_strings(reader, "compatible"),
        dt_model=next(iter(dt_strings(reader, "model")), None),
        core_types=frozenset(core_type(f) for f in per_cpu.values()),
        cpuinfo_global=glob_fields,
        cpu_model=cpu_model,
        notes=notes,
    )
    board = identify(seen)

    limits = cgroup.read_limits(reader)
    allowed = cgroup.affinity() if live else (set(limits.cpuset) if limits.cpuset else None)
    usable, allowed_count = cgroup.usable_cpus(online, allowed, limits.quota_cpus)
    memory = _memory(reader, limits, notes, live=live)
    container = cgroup.container_evidence(reader)
    if container:
        notes.append(f"container: {container}")

    gpu = _gpu(board, reader)
    opencv = None
    if live:
        # Importing torch costs seconds on a Pi: ask it only where a GPU is known to exist
        # or the program already loaded torch.
        if gpu.present or "torch" in sys.modules:
            gpu, note = live_facts.ask_torch(gpu, reader)
            if note:
                notes.append(note)
        opencv = live_facts.ask_opencv(reader)

    platform = Platform(
        family=board.family,
        model=board.model,
        model_reported=board.model_reported,
        soc=board.soc,
        board_id=board.board_id,
        carrier_id=board.carrier_id,
        compatible=seen.compatible,
        l4t_release=board.l4t_release,
        pi_revision=board.pi_revision,
        machine=seen.machine,
        kernel_release=reader.read_line("proc/sys/kernel/osrelease")
        or (os.uname().release if live else None),
        in_container=container is not None,
        cpu=CpuInfo(
            online_count=max(1, len(online)),
            online=online,
            clusters=cpu_clusters,
            usable_count=usable,
            affinity_count=allowed_count,
            quota_cpus=limits.quota_cpus,
            model_name=cpu_model,
        ),
        memory=memory,
        gpu=gpu,
        opencv=opencv,
        root=root,
        live=live,
        notes=tuple(notes),
        hw_decoders=hw_decoders(reader, discrete_nvidia=gpu.present and not gpu.integrated),
        power_mode=read_power_mode(reader, live=live) if board.family == "jetson" else None,
    )
    if platform.unsupported:
        platform = dataclasses.replace(platform, notes=(*platform.notes, platform.unsupported))
    return platform


DT_DIRS = ("proc/device-tree", "sys/firmware/devicetree/base")
# DMI placeholders firmware vendors leave in place of a product name.
_JUNK_DMI = {"", "to be filled by o.e.m.", "system product name", "default string", "<bad index>"}


@dataclass(frozen=True)
class Seen:
    """What identification looks at, read once."""

    reader: Reader
    machine: str
    compatible: tuple[str, ...]
    dt_model: str | None
    core_types: frozenset[str]
    cpuinfo_global: dict[str, str]
    cpu_model: str | None
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Board:
    family: Family
    model: str
    model_reported: str | None
    soc: str | None
    board_id: str | None = None
    carrier_id: str | None = None
    l4t_release: str | None = None
    pi_revision: PiRevision | None = None


def dt_strings(reader: Reader, name: str) -> tuple[str, ...]:
    """A device-tree string property, through ``proc/device-tree`` or ``sys/firmware``."""
    for base in DT_DIRS:
        found = reader.read_dt_strings(f"{base}/{name}")
        if found:
            return found
    return ()


def identify(seen: Seen) -> Board:
    """The board, trying Jetson, then Raspberry Pi, then generic ARM or x86."""
    board = None
    if not seen.machine.startswith(("x86", "i686")):
        board = _jetson(seen) or _raspberry_pi(seen)
    return board or _generic(seen)


def _jetson(seen: Seen) -> Board | None:
    reader, compatible, dt_model = seen.reader, seen.compatible, seen.dt_model
    ids = boards.jetson_ids(compatible)
    release, release_board = boards.parse_tegra_release(reader.read_text("etc/nv_tegra_release"))
    soc0 = reader.read_line("sys/devices/soc0/family")
    soc0_id = reader.read_int("sys/devices/soc0/soc_id")
    chips = [c.split(",", 1)[-1] for c in compatible]
    dt_soc = next((chip for chip in chips if chip in boards.TEGRA_SOCS), None)
    core_soc = next(
        (boards.NVIDIA_CORE_SOC[t] for t in sorted(seen.core_types) if t in boards.NVIDIA_CORE_SOC),
        None,
    )
    jetson_model = dt_model if dt_model and "jetson" in dt_model.lower() else None
    tegra_soc0 = (soc0 or "").lower() == "tegra"
    if not (dt_soc or ids.module or jetson_model or release or tegra_soc0 or core_soc):
        return None
    soc = (
        dt_soc
        or ids.soc
        or boards.TEGRA_SOC_IDS.get(soc0_id if soc0_id is not None else -1)
        or core_soc
        or boards.soc_from_release(release, release_board)
    )
    if not compatible:
        seen.notes.append("no device tree (container?): Jetson identified from files that remain")
    if ids.name and ids.name != boards.JETSON_SKUS.get(ids.module or ""):
        seen.notes.append(
            f"device tree lists several module SKUs; board_id {ids.module} is the first"
        )
    if ids.name:
        model = f"NVIDIA {ids.name}" + (" Super" if ids.super_mode else "")
    elif jetson_model:
        model = jetson_model
    elif soc in boards.TEGRA_SOCS:
        model = f"NVIDIA Jetson ({boards.TEGRA_SOCS[soc].name})"
    else:
        model = "NVIDIA Jetson (unknown model)"
    return Board("jetson", model, dt_model, soc, ids.module, ids.carrier, release)


def _pi_revision_code(seen: Seen) -> str | None:
    if seen.cpuinfo_global.get("Revision"):
        return seen.cpuinfo_global["Revision"]
    # Newer arm64 kernels may drop cpuinfo's Revision line; the firmware's DT keeps it.
    for base in DT_DIRS:
        data = seen.reader.read_bytes(f"{base}/system/linux,revision")
        if data is not None and len(data) == 4:
            return f"{int.from_bytes(data, 'big'):x}"
    return None


def _raspberry_pi(seen: Seen) -> Board | None:
    compatible = seen.compatible
    reported = seen.dt_model or seen.cpuinfo_global.get("Model")
    is_pi = any(c.startswith("raspberrypi,") for c in compatible) or (
        reported is not None and reported.startswith("Raspberry Pi")
    )
    if not is_pi:
        return None
    # cpuinfo's "Hardware : BCM2835" is what the kernel calls every Pi: never the SoC.
    decoded = boards.decode_pi_revision(_pi_revision_code(seen))
    if decoded is not None:
        revision, model = decoded
        soc = revision.processor if revision.processor != "unknown" else None
        return Board("raspberry_pi", model, reported, soc, pi_revision=revision)
    soc = next((c.split(",", 1)[1].upper() for c in compatible if c.startswith("brcm,bcm")), None)
    model = (reported or "Raspberry Pi (unknown model)").split(" Rev ")[0]
    return Board("raspberry_pi", model, reported, soc)


def _generic(seen: Seen) -> Board:
    if seen.machine.startswith(("arm", "aarch64")) or (
        seen.machine == "unknown" and seen.compatible
    ):
        soc = seen.compatible[-1].split(",", 1)[-1] if seen.compatible else None
        return Board("arm", seen.dt_model or "unknown", seen.dt_model, soc)
    # DMI is read on x86 only: on Jetsons its product names can be wrong.
    vendor = seen.reader.read_line("sys/class/dmi/id/sys_vendor") or ""
    product = seen.reader.read_line("sys/class/dmi/id/product_name") or ""
    dmi = None if product.lower() in _JUNK_DMI else f"{vendor} {product}".strip()
    return Board("x86", dmi or seen.cpu_model or "unknown", dmi, None)


CPU_DIR = "sys/devices/system/cpu"


def _hex(value: str | None) -> int | None:
    if value is None or not re.fullmatch(r"0x[0-9a-fA-F]{1,8}", value):
        return None
    return int(value, 16)


def core_type(fields: dict[str, str] | None) -> str:
    """Core name from one cpuinfo block: implementer/part on ARM, ``model name`` on x86."""
    if not fields:
        return "unknown"
    implementer, part = _hex(fields.get("CPU implementer")), _hex(fields.get("CPU part"))
    if implementer is not None and part is not None:
        return CORE_NAMES.get((implementer, part), f"unknown ({implementer:#x}:{part:#05x})")
    name = " ".join(fields.get("model name", "").split())
    # ARM kernels print "ARMv8 Processor rev 1 (v8l)" there: no core name in it.
    if name and not name.startswith("ARMv"):
        return name
    return "unknown"


def machine_from_cpuinfo(per_cpu: dict[int, dict[str, str]], glob: dict[str, str]) -> str:
    """uname-style architecture as the kernel's cpuinfo shows it (not the cores' ISA)."""
    blocks = [*per_cpu.values(), glob]
    for fields in blocks:
        if "vendor_id" in fields or "flags" in fields:
            return "x86_64" if " lm " in f" {fields.get('flags', '')} " else "i686"
    for fields in blocks:
        # 32-bit kernels name the ELF platform here; ARM1176 (Pi 1, Zero) says
        # "CPU architecture: 7" although uname says armv6l.
        platform = re.search(r"\((v[5-7]\w*l)\)\s*$", fields.get("model name", ""))
        if platform:
            return "arm" + platform.group(1)
    for fields in blocks:
        arch = fields.get("CPU architecture", "")
        features = fields.get("Features", "").split()
        # A 32-bit kernel on 64-bit cores (Pi Zero 2 W on a 32-bit OS) says 7.
        if arch in ("8", "AArch64") and ("asimd" in features or "fp" in features):
            return "aarch64"
        if arch in ("7", "8"):
            return "armv7l"
        if arch.startswith("5") or arch == "6":
            return "armv6l"
    return "unknown"


def online_cpus(reader: Reader, per_cpu: dict[int, dict[str, str]]) -> tuple[tuple[int, ...], str]:
    """Online CPU ids and the file they came from."""
    for name in ("online", "possible"):
        cpus = parse_cpu_list(reader.read_line(f"{CPU_DIR}/{name}"))
        if cpus:
            return cpus, f"{CPU_DIR}/{name}"
    if per_cpu:
        return tuple(sorted(per_cpu)), "proc/cpuinfo"
    return (), "nothing"


def clusters(
    reader: Reader, online: tuple[int, ...], per_cpu: dict[int, dict[str, str]]
) -> tuple[CpuCluster, ...]:
    """Online CPUs grouped by (core type, max frequency, physical package)."""
    groups: dict[tuple[str, int | None, int | None], list[int]] = {}
    for cpu in online:
        khz = reader.read_int(f"{CPU_DIR}/cpu{cpu}/cpufreq/cpuinfo_max_freq")
        package = reader.read_int(f"{CPU_DIR}/cpu{cpu}/topology/physical_package_id")
        key = (
            core_type(per_cpu.get(cpu)),
            khz if khz is not None and khz > 0 else None,
            package if package is not None and package >= 0 else None,
        )
        groups.setdefault(key, []).append(cpu)
    out = [
        CpuCluster(
            core_type=kind,
            count=len(cpus),
            cpus=tuple(cpus),
            max_mhz=None if khz is None else khz / 1000,
        )
        for (kind, khz, _), cpus in groups.items()
    ]
    return tuple(sorted(out, key=lambda c: c.cpus[0]))


def memory_facts(reader: Reader) -> dict[str, int | None]:
    """MemTotal, MemAvailable, SwapTotal (bytes) from meminfo; Nones when absent."""
    table = parse_kb_table(reader.read_text("proc/meminfo"))
    available = table.get("MemAvailable")
    if available is None and "MemFree" in table:
        # Kernels before 3.14 have no MemAvailable; free + page cache is the usual stand-in.
        available = table["MemFree"] + table.get("Buffers", 0) + table.get("Cached", 0)
    return {
        "total": table.get("MemTotal"),
        "available": available,
        "swap": table.get("SwapTotal"),
    }


def zram_swap(reader: Reader) -> tuple[bool | None, int | None]:
    """(swap on zram?, zram swap bytes) from proc/swaps; (None, None) when unreadable."""
    text = reader.read_text("proc/swaps")
    if text is None or not text.startswith("Filename"):
        return None, None
    total = 0
    found = False
    for line in text.splitlines()[1:]:
        fields = line.split()
        if (
            len(fields) >= 3
            and fields[0].startswith("/dev/zram")
            and re.fullmatch(r"\d{1,18}", fields[2])
        ):
            found = True
            total += int(fields[2]) * 1024
    return found, total if found else 0


_SIZE_RE = re.compile(r"(\d{1,20})([kKmMgG%]?)")


def shm_size(reader: Reader, *, live: bool, total: int | None) -> int | None:
    """``/dev/shm`` size: statvfs when live, else the tmpfs mount's ``size=`` option."""
    if live:
        path = reader.resolve("dev/shm")
        try:
            st = os.statvfs(path) if path else None
        except OSError:
            st = None
        if st is not None and st.f_blocks > 0:
            return st.f_blocks * st.f_frsize
    text = reader.read_text("proc/self/mounts") or reader.read_text("proc/mounts") or ""
    size: int | None = None
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 4 or fields[1] != "/dev/shm" or fields[2] != "tmpfs":
            continue
        size = None if total is None else total // 2  # tmpfs default: half of RAM
        for option in fields[3].split(","):
            key, _, value = option.partition("=")
            match = _SIZE_RE.fullmatch(value) if key == "size" else None
            if match:
                number, unit = int(match.group(1)), match.group(2).lower()
                if unit == "%":
                    size = None if total is None else total * number // 100
                else:
                    size = number * {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[unit]
    return size


_GST_DIRS = (
    "usr/lib/aarch64-linux-gnu/gstreamer-1.0",
    "usr/lib/arm-linux-gnueabihf/gstreamer-1.0",
    "usr/lib/x86_64-linux-gnu/gstreamer-1.0",
    "usr/lib/gstreamer-1.0",
)


def hw_decoders(reader: Reader, *, discrete_nvidia: bool) -> tuple[str, ...]:
    """GStreamer hardware decoder elements whose plugin and device files both exist."""
    plugins = {name for d in _GST_DIRS for name in reader.listdir(d)}
    v4l2_names = [
        reader.read_line(f"sys/class/video4linux/{dev}/name") or ""
        for dev in reader.listdir("sys/class/video4linux")
    ]
    found = []
    # JetPack's NVDEC plugin; the file alone is the evidence (its devices vary by release).
    if "libgstnvvideo4linux2.so" in plugins:
        found.append("nvv4l2decoder")
    # Raspberry Pi <= 4: the firmware codec is a stateful V4L2 decoder (/dev/video10).
    if "libgstvideo4linux2.so" in plugins and any("codec-decode" in n for n in v4l2_names):
        found.append("v4l2h264dec")
    # Raspberry Pi 5: HEVC only, through a stateless V4L2 decoder.
    if "libgstv4l2codecs.so" in plugins and any("hevc-dec" in n for n in v4l2_names):
        found.append("v4l2slh265dec")
    if "libgstnvcodec.so" in plugins and discrete_nvidia:
        found.append("nvh264dec")
    return tuple(found)


# `nvpmodel -q` answers in milliseconds; a hung one must not hang a probe.
_NVPMODEL_TIMEOUT_S = 5.0


def read_power_mode(reader: Reader, *, live: bool) -> str | None:
    """The Jetson power mode (``"MAXN (0)"``), or None where the device has none.

    ``nvpmodel -q`` on a live probe, else the mode number in ``var/lib/nvpmodel/status``
    named through ``etc/nvpmodel.conf`` under the probe root.
    """
    if live and shutil.which("nvpmodel"):
        try:
            done = subprocess.run(
                ["nvpmodel", "-q"],
                capture_output=True,
                text=True,
                timeout=_NVPMODEL_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            done = None
        if done is not None and done.returncode == 0:
            name = re.search(r"NV Power Mode:\s*(\S+)", done.stdout)
            number = re.search(r"^\s*(\d+)\s*$", done.stdout, re.MULTILINE)
            if name:
                return name.group(1) + (f" ({int(number.group(1))})" if number else "")
    found = re.search(r"pmode:\s*(\d+)", reader.read_text("var/lib/nvpmodel/status") or "")
    if not found:
        return None
    mode = int(found.group(1))
    conf = reader.read_text("etc/nvpmodel.conf") or ""
    named = re.search(rf"<\s*POWER_MODEL\s+ID={mode}\s+NAME=([^\s>]+)", conf)
    return f"{named.group(1)} ({mode})" if named else str(mode)
