"""CPU and memory facts from ``proc`` and ``sys`` files under a probe root."""

from __future__ import annotations

import os
import re

from ._boards import CORE_NAMES
from ._read import Reader, parse_cpu_list, parse_kb_table
from .facts import CpuCluster

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
