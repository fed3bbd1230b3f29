"""An Orin Nano on JetPack 5 whose device tree lists two Orin Nano SKUs is an Orin Nano.

The tree is the jetson-orin-nano fixture (an Orin Nano 8GB devkit) with the device tree
and release file of JetPack 5: its compatible list names p3767-0003 and p3767-0005, both
Orin Nano 8GB modules, and L4T R35.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from edgeload import probe

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "platforms"
COMPATIBLE = ("nvidia,p3768-0000+p3767-0003", "nvidia,p3767-0003", "nvidia,p3767-0005",
              "nvidia,tegra234")  # fmt: skip
RELEASE = (
    "# R35 (release), REVISION: 4.1, GCID: 33958178, BOARD: t186ref, EABI: aarch64, "
    "DATE: Tue Aug  1 19:57:35 UTC 2023\n"
)


def test_two_orin_nano_skus_name_an_orin_nano(tmp_path):
    root = tmp_path / "orin-nano-jp5"
    shutil.copytree(FIXTURES / "jetson-orin-nano", root, symlinks=True)
    dt = root / "sys/firmware/devicetree/base"
    (dt / "compatible").write_bytes(b"".join(c.encode() + b"\0" for c in COMPATIBLE))
    (dt / "model").write_bytes(b"NVIDIA Orin Nano Developer Kit\0")
    (root / "etc/nv_tegra_release").write_text(RELEASE)
    p = probe(root)
    assert (p.family, p.soc, p.board_id, p.l4t_release) == (
        "jetson", "tegra234", "p3767-0003", "35.4.1",
    )  # fmt: skip
    assert p.model == "NVIDIA Jetson Orin Nano 8GB"
    assert "NX" not in p.model


def _probe_compatible(root, compatible):
    """Probe a device tree that holds only ``compatible`` (as a bare container might)."""
    dt = root / "proc" / "device-tree"
    dt.mkdir(parents=True)
    (dt / "compatible").write_bytes(b"".join(c.encode() + b"\0" for c in compatible))
    return probe(root)


def test_skus_of_different_modules_keep_the_family_name(tmp_path):
    # an Orin NX and an Orin Nano SKU share only "Jetson Orin": the family name stays
    p = _probe_compatible(tmp_path / "nx-nano", ("nvidia,p3767-0000", "nvidia,p3767-0004",
                                                 "nvidia,tegra234"))  # fmt: skip
    assert p.model == "NVIDIA Jetson Orin NX/Nano"
    # two AGX Orin SKUs of different memory sizes are an AGX Orin
    p = _probe_compatible(tmp_path / "agx", ("nvidia,p3701-0004", "nvidia,p3701-0005",
                                             "nvidia,tegra234"))  # fmt: skip
    assert p.model == "NVIDIA Jetson AGX Orin"
