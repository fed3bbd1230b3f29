"""Assemble a :class:`~edgeload.probe.Platform` from the readers.

Identification order, most trusted first: DT ``compatible`` (module ids do not drift
between JetPack releases, model strings do), then the DT ``model``, then files that
survive inside containers (``etc/nv_tegra_release``, ``sys/devices/soc0``, cpuinfo).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from . import _probe_boards as boards
from . import _probe_cgroup as cgroup
from . import _probe_hw as hw
from . import _probe_live as live_facts
from ._probe_read import Reader, parse_cpuinfo
from .errors import PlatformError
from .probe import CpuInfo, Family, GpuInfo, MemoryInfo, PiRevision, Platform

_DT_DIRS = ("proc/device-tree", "sys/firmware/devicetree/base")
_JUNK_DMI = {"", "to be filled by o.e.m.", "system product name", "default string", "<bad index>"}


@dataclass(frozen=True)
class _Board:
    family: Family
    model: str
    model_reported: str | None
    soc: str | None
    board_id: str | None = None
    carrier_id: str | None = None
    l4t_release: str | None = None
    pi_revision: PiRevision | None = None


def _dt_strings(reader: Reader, name: str) -> tuple[str, ...]:
    for base in _DT_DIRS:
        found = reader.read_dt_strings(f"{base}/{name}")
        if found:
            return found
    return ()


def _jetson(
    reader: Reader,
    compatible: tuple[str, ...],
    dt_model: str | None,
    core_types: set[str],
    notes: list[str],
) -> _Board | None:
    ids = boards.jetson_ids(compatible)
    release, release_board = boards.parse_tegra_release(reader.read_text("etc/nv_tegra_release"))
    soc0 = reader.read_line("sys/devices/soc0/family")
    soc0_id = reader.read_int("sys/devices/soc0/soc_id")
    dt_soc = next(
        (c.split(",", 1)[1] for c in compatible if c.split(",", 1)[-1] in boards.TEGRA_SOCS), None
    )
    core_soc = next(
        (boards.NVIDIA_CORE_SOC[t] for t in core_types if t in boards.NVIDIA_CORE_SOC), None
    )
    evidence = (
        dt_soc
        or ids.module
        or (dt_model and "jetson" in dt_model.lower())
        or release
        or (soc0 or "").lower() == "tegra"
        or core_soc
    )
    if not evidence:
        return None
    soc = (
        dt_soc
        or ids.soc
        or boards.TEGRA_SOC_IDS.get(soc0_id or -1)
        or core_soc
        or boards.soc_from_release(release, release_board)
    )
    if not compatible:
        notes.append("no device tree (container?): Jetson identified from files that remain")
    if ids.name and ids.name != boards.JETSON_SKUS.get(ids.module or ""):
        notes.append(f"device tree lists several module SKUs; board_id {ids.module} is the first")
    if ids.name:
        model = f"NVIDIA {ids.name}" + (" Super" if ids.super_mode else "")
    elif dt_model and "jetson" in dt_model.lower():
        model = dt_model
    elif soc in boards.TEGRA_SOCS:
        model = f"NVIDIA Jetson ({boards.TEGRA_SOCS[soc].name})"
    else:
        model = "NVIDIA Jetson (unknown model)"
    return _Board("jetson", model, dt_model, soc, ids.module, ids.carrier, release)


def _pi_revision_code(reader: Reader, glob_fields: dict[str, str]) -> str | None:
    if glob_fields.get("Revision"):
        return glob_fields["Revision"]
    for base in _DT_DIRS:
        data = reader.read_bytes(f"{base}/system/linux,revision")
        if data is not None and len(data) == 4:
            return f"{int.from_bytes(data, 'big'):x}"
    return None


def _raspberry_pi(
    reader: Reader, compatible: tuple[str, ...], dt_model: str | None, glob_fields: dict[str, str]
) -> _Board | None:
    reported = dt_model or glob_fields.get("Model")
    is_pi = any(c.startswith("raspberrypi,") for c in compatible) or (
        reported is not None and reported.startswith("Raspberry Pi")
    )
    if not is_pi:
        return None
    decoded = boards.decode_pi_revision(_pi_revision_code(reader, glob_fields))
    if decoded is not None:
        revision, model = decoded
        soc = revision.processor if revision.processor != "unknown" else None
        return _Board("raspberry_pi", model, reported, soc, pi_revision=revision)
    soc = next((c.split(",", 1)[1].upper() for c in compatible if c.startswith("brcm,bcm")), None)
    model = (reported or "Raspberry Pi (unknown model)").split(" Rev ")[0]
    return _Board("raspberry_pi", model, reported, soc)


def _generic(
    reader: Reader,
    machine: str,
    compatible: tuple[str, ...],
    dt_model: str | None,
    cpu_model: str | None,
) -> _Board:
    if machine.startswith(("arm", "aarch64")) or (machine == "unknown" and compatible):
        soc = compatible[-1].split(",", 1)[-1] if compatible else None
        return _Board("arm", dt_model or "unknown", dt_model, soc)
    vendor = reader.read_line("sys/class/dmi/id/sys_vendor") or ""
    product = reader.read_line("sys/class/dmi/id/product_name") or ""
    dmi = None if product.lower() in _JUNK_DMI else f"{vendor} {product}".strip()
    return _Board("x86", dmi or cpu_model or "unknown", dmi, None)


def _gpu(board: _Board, reader: Reader) -> GpuInfo:
    if board.family == "jetson":
        soc = boards.TEGRA_SOCS.get(board.soc or "")
        cc = soc.compute_capability if soc else None
        # CUDA for Tegra: pinned memory is CPU-cached (I/O coherent) from Xavier (7.2) on.
        coherent = None if cc is None else tuple(map(int, cc.split("."))) >= (7, 2)
        return GpuInfo(True, True, coherent, soc.gpu if soc else None, cc, None)
    if live_facts.nvidia_gpu_evidence(reader):
        name = None
        for bus in reader.listdir("proc/driver/nvidia/gpus"):
            info = reader.read_text(f"proc/driver/nvidia/gpus/{bus}/information") or ""
            name = next(
                (
                    ln.split(":", 1)[1].strip()
                    for ln in info.splitlines()
                    if ln.startswith("Model:")
                ),
                None,
            )
            break
        return GpuInfo(True, False, None, name, None, None)
    return GpuInfo(False, None, None, None, None, None)


def collect(root: str, *, live: bool) -> Platform:
    """Read every fact under ``root``; see :func:`edgeload.probe.probe`."""
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
    machine = os.uname().machine if live else hw.machine_from_cpuinfo(per_cpu, glob_fields)
    compatible = _dt_strings(reader, "compatible")
    dt_model = next(iter(_dt_strings(reader, "model")), None)
    cpu_model = next((f["model name"] for f in per_cpu.values() if "model name" in f), None)
    online, online_source = hw.online_cpus(reader, per_cpu)
    if not online and live:
        online = tuple(range(os.cpu_count() or 1))
        online_source = "os.cpu_count()"
    if online_source != f"{hw.CPU_DIR}/online":
        notes.append(f"online CPUs read from {online_source}")
    clusters = hw.clusters(reader, online, per_cpu)
    core_types = {c.core_type for c in clusters} | {hw.core_type(f) for f in per_cpu.values()}

    board = None
    if not machine.startswith(("x86", "i686")):
        board = _jetson(reader, compatible, dt_model, core_types, notes) or _raspberry_pi(
            reader, compatible, dt_model, glob_fields
        )
    board = board or _generic(reader, machine, compatible, dt_model, cpu_model)

    limits = cgroup.read_limits(reader)
    allowed = cgroup.affinity() if live else (set(limits.cpuset) if limits.cpuset else None)
    usable, allowed_count = cgroup.usable_cpus(online, allowed, limits.quota_cpus)
    mem = hw.memory_facts(reader)
    if mem["total"] is None:
        notes.append("proc/meminfo missing or unreadable: RAM unknown")
    zram, zram_bytes = hw.zram_swap(reader)
    container = cgroup.container_evidence(reader)
    if container:
        notes.append(f"container: {container}")

    gpu = _gpu(board, reader)
    opencv = None
    if live:
        if gpu.present or "torch" in sys.modules:
            gpu, note = live_facts.ask_torch(gpu)
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
        compatible=compatible,
        l4t_release=board.l4t_release,
        pi_revision=board.pi_revision,
        machine=machine or "unknown",
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
        memory=MemoryInfo(
            total_bytes=mem["total"],
            available_bytes=mem["available"],
            limit_bytes=limits.memory_limit,
            limit_used_bytes=limits.memory_used,
            shm_bytes=hw.shm_size(reader, live=live, total=mem["total"]),
            swap_bytes=mem["swap"],
            zram=zram,
            zram_bytes=zram_bytes,
        ),
        gpu=gpu,
        opencv=opencv,
        root=root,
        live=live,
        notes=tuple(notes),
        hw_decoders=hw.hw_decoders(reader, discrete_nvidia=gpu.present and not gpu.integrated),
    )
