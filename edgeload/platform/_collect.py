"""Assemble a :class:`~edgeload.platform.probe.Platform` from the readers."""

from __future__ import annotations

import os
import sys

from ..errors import PlatformError
from . import _boards as boards
from . import _cgroup as cgroup
from . import _hw as hw
from . import _live as live_facts
from ._identify import Board, Seen, dt_strings, identify
from ._power import read_power_mode
from ._read import Reader, parse_cpuinfo
from .facts import CpuInfo, GpuInfo, MemoryInfo, Platform


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
    mem = hw.memory_facts(reader)
    if mem["total"] is None:
        notes.append("proc/meminfo missing or unreadable: RAM unknown")
    zram, zram_bytes = hw.zram_swap(reader)
    return MemoryInfo(
        total_bytes=mem["total"],
        available_bytes=mem["available"],
        limit_bytes=limits.memory_limit,
        limit_used_bytes=limits.memory_used,
        shm_bytes=hw.shm_size(reader, live=live, total=mem["total"]),
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
    online, online_source = hw.online_cpus(reader, per_cpu)
    if not online and live:
        online, online_source = tuple(range(os.cpu_count() or 1)), "os.cpu_count()"
    if online_source != f"{hw.CPU_DIR}/online":
        notes.append(f"online CPUs read from {online_source}")
    clusters = hw.clusters(reader, online, per_cpu)
    cpu_model = next((f["model name"] for f in per_cpu.values() if "model name" in f), None)
    machine = os.uname().machine if live else hw.machine_from_cpuinfo(per_cpu, glob_fields)
    seen = Seen(
        reader=reader,
        machine=machine or "unknown",
        compatible=dt_strings(reader, "compatible"),
        dt_model=next(iter(dt_strings(reader, "model")), None),
        core_types=frozenset(hw.core_type(f) for f in per_cpu.values()),
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

    return Platform(
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
            clusters=clusters,
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
        hw_decoders=hw.hw_decoders(reader, discrete_nvidia=gpu.present and not gpu.integrated),
        power_mode=read_power_mode(reader, live=live) if board.family == "jetson" else None,
    )
