"""Which board this is: family, model, SoC, module ids.

Order of trust: DT ``compatible`` (module ids do not drift between JetPack releases,
model strings do), then the DT ``model``, then files that survive inside containers
(``etc/nv_tegra_release``, ``sys/devices/soc0``, cpuinfo core types).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import _boards as boards
from ._read import Reader
from .facts import Family, PiRevision

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
