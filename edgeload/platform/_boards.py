"""Board facts: Jetson module ids and SoCs, Raspberry Pi revision codes, ARM core names.

Tables only, plus the small decoders that use them. Sources: NVIDIA's module part
numbers (DT ``compatible``), the "CUDA for Tegra" application note (compute
capability, I/O coherency), Raspberry Pi's "revision codes" documentation, and the
Arm/NVIDIA MIDR part numbers shown in ``proc/cpuinfo``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .facts import PiRevision

# (implementer, part) from cpuinfo -> core name.
CORE_NAMES: dict[tuple[int, int], str] = {
    (0x41, 0xB76): "ARM1176",
    (0x41, 0xC07): "Cortex-A7",
    (0x41, 0xC09): "Cortex-A9",
    (0x41, 0xC0F): "Cortex-A15",
    (0x41, 0xD01): "Cortex-A32",
    (0x41, 0xD03): "Cortex-A53",
    (0x41, 0xD04): "Cortex-A35",
    (0x41, 0xD05): "Cortex-A55",
    (0x41, 0xD07): "Cortex-A57",
    (0x41, 0xD08): "Cortex-A72",
    (0x41, 0xD09): "Cortex-A73",
    (0x41, 0xD0A): "Cortex-A75",
    (0x41, 0xD0B): "Cortex-A76",
    (0x41, 0xD0C): "Neoverse-N1",
    (0x41, 0xD0D): "Cortex-A77",
    (0x41, 0xD40): "Neoverse-V1",
    (0x41, 0xD41): "Cortex-A78",
    (0x41, 0xD42): "Cortex-A78AE",
    (0x41, 0xD44): "Cortex-X1",
    (0x41, 0xD46): "Cortex-A510",
    (0x41, 0xD47): "Cortex-A710",
    (0x41, 0xD48): "Cortex-X2",
    (0x41, 0xD49): "Neoverse-N2",
    (0x41, 0xD4F): "Neoverse-V2",
    (0x41, 0xD4B): "Cortex-A78C",
    (0x41, 0xD80): "Cortex-A520",
    (0x41, 0xD81): "Cortex-A720",
    (0x4E, 0x000): "Denver",
    (0x4E, 0x003): "Denver2",
    (0x4E, 0x004): "Carmel",
}

# Cores that only NVIDIA Tegra SoCs have: they identify the SoC when the device tree
# is hidden (containers) and nv_tegra_release is ambiguous (R32 says t186ref for both).
NVIDIA_CORE_SOC = {"Denver2": "tegra186", "Carmel": "tegra194"}


@dataclass(frozen=True)
class TegraSoc:
    name: str
    gpu: str
    compute_capability: str | None


TEGRA_SOCS: dict[str, TegraSoc] = {
    "tegra210": TegraSoc("Tegra X1", "NVIDIA Tegra X1 (Maxwell)", "5.3"),
    "tegra186": TegraSoc("Tegra X2", "NVIDIA Tegra X2 (Pascal)", "6.2"),
    "tegra194": TegraSoc("Xavier", "NVIDIA Xavier (Volta)", "7.2"),
    "tegra234": TegraSoc("Orin", "NVIDIA Orin (Ampere)", "8.7"),
    "tegra264": TegraSoc("Thor", "NVIDIA Thor (Blackwell)", None),
}

# sys/devices/soc0/soc_id (chip id, decimal) -> SoC.
TEGRA_SOC_IDS = {33: "tegra210", 24: "tegra186", 25: "tegra194", 35: "tegra234", 38: "tegra264"}

# nv_tegra_release BOARD -> SoC, where unambiguous (t186ref is TX2 *and* Xavier on R32).
TEGRA_RELEASE_BOARDS = {"t210ref": "tegra210", "t194ref": "tegra194", "t234ref": "tegra234"}

# Module part number -> (family name, SoC); SKU -> specific name.
JETSON_MODULES: dict[str, tuple[str, str]] = {
    "p2180": ("Jetson TX1", "tegra210"),
    "p3448": ("Jetson Nano", "tegra210"),
    "p3310": ("Jetson TX2", "tegra186"),
    "p3489": ("Jetson TX2", "tegra186"),
    "p3636": ("Jetson TX2 NX", "tegra186"),
    "p2888": ("Jetson AGX Xavier", "tegra194"),
    "p3668": ("Jetson Xavier NX", "tegra194"),
    "p3701": ("Jetson AGX Orin", "tegra234"),
    "p3767": ("Jetson Orin NX/Nano", "tegra234"),
}
JETSON_SKUS: dict[str, str] = {
    "p2180-1000": "Jetson TX1",
    "p3448-0000": "Jetson Nano 4GB (devkit module)",
    "p3448-0002": "Jetson Nano 4GB (eMMC)",
    "p3448-0003": "Jetson Nano 2GB",
    "p3310-1000": "Jetson TX2",
    "p3489-0000": "Jetson TX2i",
    "p3489-0888": "Jetson TX2 4GB",
    "p3636-0001": "Jetson TX2 NX",
    "p2888-0001": "Jetson AGX Xavier 16GB",
    "p2888-0003": "Jetson AGX Xavier 32GB",
    "p2888-0004": "Jetson AGX Xavier 32GB",
    "p2888-0005": "Jetson AGX Xavier 64GB",
    "p2888-0006": "Jetson AGX Xavier 8GB",
    "p2888-0008": "Jetson AGX Xavier Industrial",
    "p3668-0000": "Jetson Xavier NX (devkit module)",
    "p3668-0001": "Jetson Xavier NX",
    "p3668-0003": "Jetson Xavier NX 16GB",
    "p3701-0000": "Jetson AGX Orin (devkit module)",
    "p3701-0002": "Jetson IGX Orin (devkit module)",
    "p3701-0004": "Jetson AGX Orin 32GB",
    "p3701-0005": "Jetson AGX Orin 64GB",
    "p3701-0008": "Jetson AGX Orin Industrial",
    "p3767-0000": "Jetson Orin NX 16GB",
    "p3767-0001": "Jetson Orin NX 8GB",
    "p3767-0003": "Jetson Orin Nano 8GB",
    "p3767-0004": "Jetson Orin Nano 4GB",
    "p3767-0005": "Jetson Orin Nano 8GB (devkit module)",
}

_PART_RE = re.compile(r"(p\d{4})-(\d{4})")


@dataclass(frozen=True)
class JetsonIds:
    module: str | None
    carrier: str | None
    name: str | None
    soc: str | None
    super_mode: bool


def jetson_ids(compatible: tuple[str, ...]) -> JetsonIds:
    """Module and carrier ids from ``nvidia,<carrier>+<module>[-super]`` entries."""
    modules: list[str] = []
    carrier = None
    super_mode = False
    for entry in compatible:
        body = entry.split(",", 1)[-1].lower()
        if body.endswith("-super"):
            super_mode = True
        carrier_part, plus, module_part = body.rpartition("+")
        if plus and carrier is None:
            match = _PART_RE.search(carrier_part)
            carrier = f"{match.group(1)}-{match.group(2)}" if match else None
        match = _PART_RE.search(module_part)
        if match and match.group(1) in JETSON_MODULES:
            modules.append(f"{match.group(1)}-{match.group(2)}")
    if not modules:
        return JetsonIds(None, carrier, None, None, super_mode)
    module = modules[0]
    family_name, soc = JETSON_MODULES[module[:5]]
    # A DT may list several SKUs of one module (Xavier NX lists -0000 and -0001; an Orin
    # Nano on JetPack 5, -0003 and -0005): then the name is what those SKUs share.
    name = JETSON_SKUS.get(module, family_name) if len(set(modules)) == 1 else None
    return JetsonIds(module, carrier, name or _shared_name(modules, family_name), soc, super_mode)


def _shared_name(modules: list[str], family_name: str) -> str:
    """The words all listed SKUs' names begin with ("Jetson Orin Nano 8GB"), if they name
    more than the family's first two words; else the family name ("Jetson Orin NX/Nano")."""
    names = [JETSON_SKUS.get(m, family_name).split() for m in modules]
    shared: list[str] = []
    for words in zip(*names):
        if any(w != words[0] for w in words):
            break
        shared.append(words[0])
    return " ".join(shared) if len(shared) > 2 else family_name


def parse_tegra_release(text: str | None) -> tuple[str | None, str | None]:
    """``etc/nv_tegra_release`` line 1 -> (``"36.4.3"``, BOARD) or Nones."""
    if not text:
        return None, None
    first = text.splitlines()[0] if text.splitlines() else ""
    match = re.search(r"#\s*R(\d{1,3})\s*\(release\),\s*REVISION:\s*(\d{1,3}(?:\.\d{1,3})*)", first)
    if match is None:
        return None, None
    board = re.search(r"BOARD:\s*([\w.-]+)", first)
    return f"{match.group(1)}.{match.group(2)}", board.group(1) if board else None


def soc_from_release(release: str | None, board: str | None) -> str | None:
    """SoC implied by the release: R34..R36 exist only for Orin; BOARD where unambiguous."""
    if board in TEGRA_RELEASE_BOARDS:
        return TEGRA_RELEASE_BOARDS[board]
    if release is not None and release.split(".")[0] in ("34", "35", "36"):
        return "tegra234"
    return None


# Raspberry Pi revision code fields (Raspberry Pi documentation, "revision codes").
PI_TYPES: dict[int, tuple[str, str]] = {
    0x00: ("A", "Raspberry Pi Model A"),
    0x01: ("B", "Raspberry Pi Model B"),
    0x02: ("A+", "Raspberry Pi Model A+"),
    0x03: ("B+", "Raspberry Pi Model B+"),
    0x04: ("2B", "Raspberry Pi 2 Model B"),
    0x05: ("Alpha", "Raspberry Pi Alpha"),
    0x06: ("CM1", "Raspberry Pi Compute Module 1"),
    0x08: ("3B", "Raspberry Pi 3 Model B"),
    0x09: ("Zero", "Raspberry Pi Zero"),
    0x0A: ("CM3", "Raspberry Pi Compute Module 3"),
    0x0C: ("Zero W", "Raspberry Pi Zero W"),
    0x0D: ("3B+", "Raspberry Pi 3 Model B+"),
    0x0E: ("3A+", "Raspberry Pi 3 Model A+"),
    0x10: ("CM3+", "Raspberry Pi Compute Module 3+"),
    0x11: ("4B", "Raspberry Pi 4 Model B"),
    0x12: ("Zero 2 W", "Raspberry Pi Zero 2 W"),
    0x13: ("400", "Raspberry Pi 400"),
    0x14: ("CM4", "Raspberry Pi Compute Module 4"),
    0x15: ("CM4S", "Raspberry Pi Compute Module 4S"),
    0x17: ("5", "Raspberry Pi 5"),
    0x18: ("CM5", "Raspberry Pi Compute Module 5"),
    0x19: ("500", "Raspberry Pi 500"),
    0x1A: ("CM5 Lite", "Raspberry Pi Compute Module 5 Lite"),
}
PI_MEMORY_MB = {0: 256, 1: 512, 2: 1024, 3: 2048, 4: 4096, 5: 8192, 6: 16384}
PI_MANUFACTURERS = {
    0: "Sony UK",
    1: "Egoman",
    2: "Embest",
    3: "Sony Japan",
    4: "Embest",
    5: "Stadium",
}
PI_PROCESSORS = {0: "BCM2835", 1: "BCM2836", 2: "BCM2837", 3: "BCM2711", 4: "BCM2712"}


def decode_pi_revision(code: str | None) -> tuple[PiRevision, str] | None:
    """A new-style revision code -> (decoded fields, full model name); None otherwise."""
    if code is None or not re.fullmatch(r"(0x)?[0-9a-fA-F]{1,8}", code.strip()):
        return None
    value = int(code.strip(), 16)
    if not value & (1 << 23):
        return None  # old-style codes (before the Pi 2) are a lookup table; not decoded
    short, full = PI_TYPES.get((value >> 4) & 0xFF, ("unknown", "Raspberry Pi (unknown model)"))
    decoded = PiRevision(
        code=f"{value & 0xFFFFFF:06x}",
        model=short,
        ram_mb=PI_MEMORY_MB.get((value >> 20) & 0x7),
        manufacturer=PI_MANUFACTURERS.get((value >> 16) & 0xF, "unknown"),
        processor=PI_PROCESSORS.get((value >> 12) & 0xF, "unknown"),
        revision=f"1.{value & 0xF}",
    )
    return decoded, full
