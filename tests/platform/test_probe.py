"""probe: every fixture device detects as its README says; bad trees never raise."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgeload.errors import PlatformError
from edgeload.platform.probe import Platform, probe

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "platforms"
KB = 1024
A57, A78AE, CARMEL = "Cortex-A57", "Cortex-A78AE", "Carmel"
ADL = "12th Gen Intel(R) Core(TM) i7-12700"

# Expected values from tests/fixtures/platforms/README.md ("Expected: ..." per device).
# clusters: (core_type, cpus, max_mhz); memory: (total, available, swap) in bytes.
EXPECTED: dict[str, dict[str, object]] = {
    "jetson-nano": {
        "family": "jetson",
        "model": "NVIDIA Jetson Nano 4GB (devkit module)",
        "soc": "tegra210",
        "board_id": "p3448-0000",
        "l4t_release": "32.6.1",
        "machine": "aarch64",
        "online": (0, 1, 2, 3),
        "clusters": [(A57, (0, 1, 2, 3), 1479.0)],
        "memory": (4059240 * KB, 592696 * KB, 2029616 * KB),
        "gpu": (True, True, False, "5.3"),
    },
    "jetson-xavier-nx": {
        "family": "jetson",
        "model": "NVIDIA Jetson Xavier NX",  # the DT lists SKUs -0000 and -0001
        "soc": "tegra194",
        "board_id": "p3668-0000",
        "l4t_release": "32.7.1",
        "machine": "aarch64",
        "online": (0, 1, 2, 3, 4, 5),
        "clusters": [(CARMEL, (0, 1), 1907.2), (CARMEL, (2, 3), 1907.2), (CARMEL, (4, 5), 1907.2)],
        "memory": (None, None, None),
        "gpu": (True, True, True, "7.2"),
    },
    "jetson-agx-orin": {
        "family": "jetson",
        "model": "NVIDIA Jetson AGX Orin (devkit module)",
        "soc": "tegra234",
        "board_id": "p3701-0000",
        "l4t_release": "36.4.3",
        "machine": "aarch64",
        "online": tuple(range(12)),
        "clusters": [
            (A78AE, (0, 1, 2, 3), 2201.6),
            (A78AE, (4, 5, 6, 7), 2201.6),
            (A78AE, (8, 9, 10, 11), 2201.6),
        ],
        "memory": (None, None, None),
        "gpu": (True, True, True, "8.7"),
    },
    "jetson-orin-nano": {
        "family": "jetson",
        "model": "NVIDIA Jetson Orin Nano 8GB (devkit module) Super",
        "soc": "tegra234",
        "board_id": "p3767-0005",
        "l4t_release": "36.4.3",
        "machine": "aarch64",
        "online": (0, 1, 2, 3, 4, 5),
        "clusters": [(A78AE, (0, 1, 2, 3), 1728.0), (A78AE, (4, 5), 1728.0)],
        "memory": (7802736 * KB, 6245596 * KB, 3901344 * KB),
        "gpu": (True, True, True, "8.7"),
    },
    "jetson-tx2": {
        # cpuinfo only: Denver2 cores exist only in Tegra186 (TX2).
        "family": "jetson",
        "model": "NVIDIA Jetson (Tegra X2)",
        "soc": "tegra186",
        "board_id": None,
        "l4t_release": None,
        "machine": "aarch64",
        "online": (0, 1, 2, 3, 4, 5),
        "clusters": [(A57, (0, 3, 4, 5), None), ("Denver2", (1, 2), None)],
        "memory": (None, None, None),
        "gpu": (True, True, False, "6.2"),
    },
    "jetson-tx2-denver-off": {
        # Only the A57 cores are left: nothing in the tree says Jetson any more.
        "family": "arm",
        "model": "unknown",
        "soc": None,
        "board_id": None,
        "l4t_release": None,
        "machine": "aarch64",
        "online": (0, 3, 4, 5),
        "clusters": [(A57, (0, 3, 4, 5), None)],
        "memory": (None, None, None),
        "gpu": (False, None, None, None),
    },
    "rpi4": {
        "family": "raspberry_pi",
        "model": "Raspberry Pi 4 Model B",
        "soc": "BCM2711",  # not cpuinfo's "Hardware : BCM2835"
        "board_id": None,
        "l4t_release": None,
        "machine": "aarch64",
        "online": (0, 1, 2, 3),
        "clusters": [("Cortex-A72", (0, 1, 2, 3), 1500.0)],
        "memory": (8000520 * KB, 7799852 * KB, None),
        "gpu": (False, None, None, None),
        "pi_revision": ("d03114", "4B", 8192, "Sony UK", "BCM2711", "1.4"),
    },
    "rpi-zero-2w": {
        "family": "raspberry_pi",
        "model": "Raspberry Pi Zero 2 W",  # the 2021 firmware's DT model omits the "W"
        "soc": "BCM2837",
        "board_id": None,
        "l4t_release": None,
        "machine": "armv7l",
        "online": (0, 1, 2, 3),
        "clusters": [("Cortex-A53", (0, 1, 2, 3), 1000.0)],
        "memory": (None, None, None),
        "gpu": (False, None, None, None),
        "pi_revision": ("902120", "Zero 2 W", 512, "Sony UK", "BCM2837", "1.0"),
    },
    # Trees made by us (README section "Trees made by edgeload").
    "x86-desktop": {
        "family": "x86",
        "model": "Dell Inc. OptiPlex 7000",
        "soc": None,
        "board_id": None,
        "l4t_release": None,
        "machine": "x86_64",
        "online": tuple(range(20)),
        "clusters": [(ADL, tuple(range(16)), 4800.0), (ADL, (16, 17, 18, 19), 3600.0)],
        "memory": (32651172 * KB, 28411036 * KB, 2097148 * KB),
        "gpu": (False, None, None, None),
        "usable_count": 20,
        "limit_bytes": None,
        "shm_bytes": 32651172 * KB // 2,  # tmpfs without size=: half of RAM
        "in_container": False,
    },
    "container-cgroup2": {
        "family": "x86",
        "model": ADL,
        "machine": "x86_64",
        "online": tuple(range(20)),
        "usable_count": 2,  # cpu.max 150000/100000 = 1.5, rounded up
        "quota_cpus": 1.5,
        "limit_bytes": 2 << 30,
        "shm_bytes": 64 << 20,
        "in_container": True,
    },
    "container-cgroup1": {
        "family": "x86",
        "model": "Intel(R) Core(TM) i7-7700 CPU @ 3.60GHz",
        "online": tuple(range(8)),
        "usable_count": 2,  # cpuset 0-1 is tighter than the 2.5-CPU quota
        "quota_cpus": 2.5,
        "limit_bytes": 1 << 30,
        "shm_bytes": 256 << 20,
        "in_container": True,
    },
    "jetson-agx-orin-container": {
        "family": "jetson",
        "model": "NVIDIA Jetson (Orin)",
        "soc": "tegra234",  # R36 exists only for Orin
        "board_id": None,
        "l4t_release": "36.4.3",
        "online": tuple(range(12)),
        "gpu": (True, True, True, "8.7"),
        "in_container": True,
    },
}


def _observed(p: Platform, keys: list[str]) -> dict[str, object]:
    """The facts named in an EXPECTED row, in the same shapes."""
    every = {
        "family": p.family,
        "model": p.model,
        "soc": p.soc,
        "board_id": p.board_id,
        "l4t_release": p.l4t_release,
        "machine": p.machine,
        "online": p.cpu.online,
        "clusters": [(c.core_type, c.cpus, c.max_mhz) for c in p.cpu.clusters],
        "memory": (p.memory.total_bytes, p.memory.available_bytes, p.memory.swap_bytes),
        "gpu": (p.gpu.present, p.gpu.integrated, p.gpu.io_coherent, p.gpu.compute_capability),
        "pi_revision": None
        if p.pi_revision is None
        else (
            p.pi_revision.code,
            p.pi_revision.model,
            p.pi_revision.ram_mb,
            p.pi_revision.manufacturer,
            p.pi_revision.processor,
            p.pi_revision.revision,
        ),
        "usable_count": p.cpu.usable_count,
        "quota_cpus": p.cpu.quota_cpus,
        "limit_bytes": p.memory.limit_bytes,
        "shm_bytes": p.memory.shm_bytes,
        "in_container": p.in_container,
    }
    return {k: every[k] for k in keys}


def test_every_fixture_has_an_expected_row():
    assert sorted(EXPECTED) == sorted(d.name for d in FIXTURES.iterdir() if d.is_dir())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_detects_as_documented(name):
    p = probe(FIXTURES / name)
    expected = EXPECTED[name]
    assert _observed(p, list(expected)) == expected
    assert not p.live and p.opencv is None and p.gpu.cuda_usable is None
    assert p.cpu.online_count == len(p.cpu.online)
    assert 1 <= p.cpu.usable_count <= p.cpu.online_count
    assert sum(c.count for c in p.cpu.clusters) == p.cpu.online_count
    assert json.loads(json.dumps(p.to_dict()))["family"] == p.family


def test_compatible_keeps_order_and_drops_nuls():
    p = probe(FIXTURES / "jetson-orin-nano")
    assert p.compatible == (
        "nvidia,p3768-0000+p3767-0005-super",
        "nvidia,p3767-0005",
        "nvidia,tegra234",
    )
    assert p.carrier_id == "p3768-0000"
    assert p.model_reported == "NVIDIA Jetson Orin Nano Engineering Reference Developer Kit Super"


def _copy(name: str, dest: Path) -> Path:
    root = dest / name
    shutil.copytree(FIXTURES / name, root, symlinks=True)
    return root


def test_absolute_device_tree_symlink_resolves_under_root(tmp_path):
    # proc/device-tree -> /dt (absolute): only the copy under root has it; the host does not.
    root = _copy("jetson-nano", tmp_path)
    (root / "proc" / "device-tree").unlink()
    (root / "sys" / "firmware" / "devicetree" / "base").rename(root / "dt")
    (root / "proc" / "device-tree").symlink_to("/dt")
    p = probe(root)
    assert (p.family, p.board_id, p.soc) == ("jetson", "p3448-0000", "tegra210")
    # A relative link climbing past the root stops at it: ../../dt from proc/ is the
    # tree's dt/, not the other board's device tree that sits beside the root.
    shutil.copytree(FIXTURES / "jetson-agx-orin" / "sys/firmware/devicetree/base", tmp_path / "dt")
    (root / "proc" / "device-tree").unlink()
    (root / "proc" / "device-tree").symlink_to("../../dt")
    p = probe(root)
    assert (p.family, p.board_id, p.soc) == ("jetson", "p3448-0000", "tegra210")


def test_symlink_loop_is_unknown_not_a_hang(tmp_path):
    root = _copy("rpi4", tmp_path)
    shutil.rmtree(root / "sys" / "firmware")
    (root / "proc" / "device-tree").unlink()
    (root / "proc" / "device-tree").symlink_to("device-tree")
    p = probe(root)
    # The device tree is gone, cpuinfo's Model/Revision still identify the Pi.
    assert (p.family, p.compatible, p.model) == ("raspberry_pi", (), "Raspberry Pi 4 Model B")


def test_model_string_drift_does_not_change_the_board(tmp_path):
    # R34.1 named the AGX Orin devkit "NVIDIA Orin Jetson-Small Developer Kit".
    root = _copy("jetson-agx-orin", tmp_path)
    dt = root / "sys" / "firmware" / "devicetree" / "base"
    (dt / "model").write_bytes(b"NVIDIA Orin Jetson-Small Developer Kit\x00")
    p = probe(root)
    assert (p.model, p.board_id) == ("NVIDIA Jetson AGX Orin (devkit module)", "p3701-0000")
    assert p.model_reported == "NVIDIA Orin Jetson-Small Developer Kit"


def test_cpuinfo_with_or_without_final_newline_reads_the_same(tmp_path):
    root = _copy("jetson-nano", tmp_path)
    cpuinfo = root / "proc" / "cpuinfo"
    before = probe(root).cpu
    cpuinfo.write_bytes(cpuinfo.read_bytes() + b"\n\n")
    assert probe(root).cpu == before


def test_online_falls_back_to_possible_then_cpuinfo(tmp_path):
    root = _copy("jetson-tx2", tmp_path)
    cpu_dir = root / "sys" / "devices" / "system" / "cpu"
    cpu_dir.mkdir(parents=True)
    (cpu_dir / "possible").write_text("0-5\n")
    (cpu_dir / "online").write_text("garbage\n")
    assert probe(root).cpu.online == (0, 1, 2, 3, 4, 5)
    (cpu_dir / "online").write_text("0,3-5\n")
    p = probe(root)
    assert p.cpu.online == (0, 3, 4, 5)
    assert [c.core_type for c in p.cpu.clusters] == [A57]


def _pi_with_revision(root: Path, code: str | None) -> Platform:
    """Probe a Pi whose cpuinfo carries ``Revision: code`` (no line for None)."""
    (root / "proc").mkdir(parents=True)
    revision = "" if code is None else f"Revision\t: {code}\n"
    (root / "proc/cpuinfo").write_text(
        f"processor\t: 0\n\nHardware\t: BCM2835\n{revision}Model\t\t: Raspberry Pi Rev 1.1\n"
    )
    return probe(root)


@pytest.mark.parametrize(
    ("code", "fields", "model"),
    [
        ("d03114", ("4B", 8192, "Sony UK", "BCM2711", "1.4"), "Raspberry Pi 4 Model B"),
        ("902120", ("Zero 2 W", 512, "Sony UK", "BCM2837", "1.0"), "Raspberry Pi Zero 2 W"),
        ("c03111", ("4B", 4096, "Sony UK", "BCM2711", "1.1"), "Raspberry Pi 4 Model B"),
        ("d04170", ("5", 8192, "Sony UK", "BCM2712", "1.0"), "Raspberry Pi 5"),
        ("a22082", ("3B", 1024, "Embest", "BCM2837", "1.2"), "Raspberry Pi 3 Model B"),
        ("9000c1", ("Zero W", 512, "Sony UK", "BCM2835", "1.1"), "Raspberry Pi Zero W"),
    ],
)
def test_pi_revision_codes_decode(tmp_path, code, fields, model):
    p = _pi_with_revision(tmp_path, code)
    revision = p.pi_revision
    assert revision is not None
    assert (revision.code, revision.model, revision.ram_mb) == (code, *fields[:2])
    assert (revision.manufacturer, revision.processor, revision.revision) == fields[2:]
    assert (p.family, p.model, p.soc) == ("raspberry_pi", model, fields[3])


@pytest.mark.parametrize("code", ["000e", "0010", "", "zz", None])
def test_old_or_bad_pi_revision_codes_are_not_decoded(tmp_path, code):
    p = _pi_with_revision(tmp_path, code)
    assert p.family == "raspberry_pi" and p.pi_revision is None
    assert p.model == "Raspberry Pi"  # the reported model, its " Rev" cut


def test_pi5_revision_from_device_tree_when_cpuinfo_has_none(tmp_path):
    dt = tmp_path / "proc" / "device-tree"
    (dt / "system").mkdir(parents=True)
    (dt / "compatible").write_bytes(b"raspberrypi,5-model-b\x00brcm,bcm2712\x00")
    (dt / "model").write_bytes(b"Raspberry Pi 5 Model B Rev 1.0\x00")
    (dt / "system" / "linux,revision").write_bytes(bytes.fromhex("00d04170"))
    p = probe(tmp_path)
    assert (p.family, p.model, p.soc) == ("raspberry_pi", "Raspberry Pi 5", "BCM2712")
    assert p.pi_revision is not None and p.pi_revision.ram_mb == 8192


@pytest.mark.parametrize(
    ("compatible", "module", "carrier", "name"),
    [
        (("nvidia,p3768-0000+p3767-0003-super", "nvidia,p3767-0003", "nvidia,tegra234"),
         "p3767-0003", "p3768-0000", "Jetson Orin Nano 8GB Super"),
        (("nvidia,p3509-0000+p3767-0000", "nvidia,tegra234"), "p3767-0000", "p3509-0000",
         "Jetson Orin NX 16GB"),
        (("nvidia,p3509-0000+p3636-0001", "nvidia,tegra186"), "p3636-0001", "p3509-0000",
         "Jetson TX2 NX"),
        (("nvidia,p2771-0000", "nvidia,tegra186"), None, None, None),
    ],
)  # fmt: skip
def test_jetson_module_ids(tmp_path, compatible, module, carrier, name):
    dt = tmp_path / "proc" / "device-tree"
    dt.mkdir(parents=True)
    (dt / "compatible").write_bytes(b"".join(c.encode() + b"\0" for c in compatible))
    p = probe(tmp_path)
    assert (p.family, p.board_id, p.carrier_id) == ("jetson", module, carrier)
    # A module id names the model; without one the model comes from the SoC alone.
    assert p.model == (f"NVIDIA {name}" if name else "NVIDIA Jetson (Tegra X2)")


def test_cgroup_v1_unlimited_and_v2_max_mean_no_limit(tmp_path):
    root = _copy("container-cgroup1", tmp_path)
    (root / "sys/fs/cgroup/memory/memory.limit_in_bytes").write_text("9223372036854771712\n")
    (root / "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us").write_text("-1\n")
    p = probe(root)
    assert (p.memory.limit_bytes, p.cpu.quota_cpus, p.cpu.usable_count) == (None, None, 2)
    root2 = _copy("container-cgroup2", tmp_path)
    (root2 / "sys/fs/cgroup/memory.max").write_text("max\n")
    (root2 / "sys/fs/cgroup/cpu.max").write_text("max 100000\n")
    p2 = probe(root2)
    assert (p2.memory.limit_bytes, p2.cpu.quota_cpus, p2.cpu.usable_count) == (None, None, 20)


def test_cgroup_v2_nested_path_takes_the_tightest_ancestor(tmp_path):
    root = _copy("x86-desktop", tmp_path)
    user = root / "sys/fs/cgroup/user.slice"
    (user / "memory.max").write_text(f"{3 << 30}\n")
    (user / "cpu.max").write_text("50000 100000\n")
    p = probe(root)
    assert (p.memory.limit_bytes, p.cpu.quota_cpus, p.cpu.usable_count) == (3 << 30, 0.5, 1)
    assert p.memory.usable_bytes is not None and p.memory.usable_bytes <= 3 << 30


def test_empty_root_is_all_unknown_but_valid(tmp_path):
    p = probe(tmp_path)
    assert (p.family, p.model, p.machine) == ("x86", "unknown", "unknown")
    assert (p.cpu.online_count, p.cpu.usable_count, p.cpu.clusters) == (1, 1, ())
    assert p.memory.total_bytes is None and not p.gpu.present
    assert any("cpuinfo" in note for note in p.notes)


def test_missing_root_is_a_platform_error(tmp_path):
    with pytest.raises(PlatformError, match=r"no-such-dir.*not a directory"):
        probe(tmp_path / "no-such-dir")


def _fixture_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())


_mutation = st.one_of(
    st.just("delete"),
    st.just("keep"),
    st.binary(max_size=96),
    st.integers(min_value=0, max_value=4096),  # truncate the real content here
)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(EXPECTED)), data=st.data())
def test_garbage_files_never_raise(name, data):
    with tempfile.TemporaryDirectory() as tmp:
        root = _copy(name, Path(tmp))
        for path in _fixture_files(root):
            change = data.draw(_mutation, label=str(path.relative_to(root)))
            if change == "delete":
                path.unlink()
            elif isinstance(change, bytes):
                path.write_bytes(change)
            elif isinstance(change, int):
                path.write_bytes(path.read_bytes()[:change])
        p = probe(root)
        encoded = json.dumps(p.to_dict())
        assert json.loads(encoded)["cpu"]["online_count"] >= 1
        assert 1 <= p.cpu.usable_count <= p.cpu.online_count
        assert p.family in ("jetson", "raspberry_pi", "arm", "x86")


def test_live_probe_of_this_machine():
    probe.cache_clear()
    p = probe()
    assert p.live and p.root == "/"
    assert p.machine == os.uname().machine
    if p.machine == "x86_64":
        assert p.family == "x86"
    assert p.cpu.online_count >= 1
    assert 1 <= p.cpu.usable_count <= p.cpu.online_count
    assert p.cpu.usable_count <= len(os.sched_getaffinity(0))
    assert p.memory.total_bytes is not None and p.memory.total_bytes > 0
    if os.path.isdir("/dev/shm"):
        assert p.memory.shm_bytes is not None and p.memory.shm_bytes > 0
    if os.path.exists("/.dockerenv"):
        assert p.in_container
    # OpenCV is installed in the test environment; its build facts come from cv2 itself.
    cv2 = pytest.importorskip("cv2")
    assert p.opencv is not None and p.opencv.version == cv2.__version__
    ffmpeg = re.search(r"FFMPEG:\s*(\w+)", cv2.getBuildInformation())
    assert p.opencv.ffmpeg == (ffmpeg is not None and ffmpeg.group(1) == "YES")
    json.dumps(p.to_dict())


def test_live_probe_is_cached_until_cleared():
    probe.cache_clear()
    first = probe()
    assert probe("/") is first
    probe.cache_clear()
    assert probe() is not first


@pytest.mark.parametrize(
    ("name", "files", "expected"),
    [
        ("rpi4", {}, ()),
        (
            "rpi4",
            {
                "usr/lib/aarch64-linux-gnu/gstreamer-1.0/libgstvideo4linux2.so": "",
                "sys/class/video4linux/video10/name": "bcm2835-codec-decode\n",
            },
            ("v4l2h264dec",),
        ),
        # The plugin without the firmware codec device is not a decoder.
        ("rpi4", {"usr/lib/aarch64-linux-gnu/gstreamer-1.0/libgstvideo4linux2.so": ""}, ()),
        (
            "jetson-orin-nano",
            {"usr/lib/aarch64-linux-gnu/gstreamer-1.0/libgstnvvideo4linux2.so": ""},
            ("nvv4l2decoder",),
        ),
        # NVIDIA's desktop plugin needs a discrete NVIDIA GPU.
        ("x86-desktop", {"usr/lib/x86_64-linux-gnu/gstreamer-1.0/libgstnvcodec.so": ""}, ()),
    ],
)
def test_hardware_decoders_need_plugin_and_device(tmp_path, name, files, expected):
    root = _copy(name, tmp_path)
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    assert probe(root).hw_decoders == expected


def test_discrete_nvidia_gpu_from_driver_files(tmp_path):
    root = _copy("x86-desktop", tmp_path)
    gpu_dir = root / "proc/driver/nvidia/gpus/0000:01:00.0"
    gpu_dir.mkdir(parents=True)
    (gpu_dir / "information").write_text(
        "Model: \t\t NVIDIA GeForce RTX 3060\nIRQ:   \t\t 147\nBus Type: \t PCIe\n"
    )
    plugin = root / "usr/lib/x86_64-linux-gnu/gstreamer-1.0/libgstnvcodec.so"
    plugin.parent.mkdir(parents=True)
    plugin.write_bytes(b"")
    p = probe(root)
    assert (p.gpu.present, p.gpu.integrated, p.gpu.name) == (True, False, "NVIDIA GeForce RTX 3060")
    assert p.gpu.cuda_usable is None  # a fixture root never asks torch
    assert p.hw_decoders == ("nvh264dec",)


def _arm_block(cpu: int, part: str) -> str:
    return (
        f"processor\t: {cpu}\nBogoMIPS\t: 48.00\nFeatures\t: fp asimd evtstrm aes pmull\n"
        f"CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x0\n"
        f"CPU part\t: {part}\nCPU revision\t: 0\n\n"
    )


def test_generic_arm_big_little_board(tmp_path):
    # An RK3588 layout: 4x A55 (1.8 GHz) and two pairs of A76 (2.4 GHz, separate packages).
    dt = tmp_path / "sys/firmware/devicetree/base"
    dt.mkdir(parents=True)
    (dt / "model").write_bytes(b"Radxa ROCK 5B\x00")
    (dt / "compatible").write_bytes(b"radxa,rock-5b\x00rockchip,rk3588\x00")
    parts = ["0xd05"] * 4 + ["0xd0b"] * 4
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text("".join(_arm_block(i, p) for i, p in enumerate(parts)))
    cpu_dir = tmp_path / "sys/devices/system/cpu"
    cpu_dir.mkdir(parents=True)
    (cpu_dir / "online").write_text("0-7\n")
    for cpu, (khz, package) in enumerate(
        [(1800000, 0)] * 4 + [(2400000, 1)] * 2 + [(2400000, 2)] * 2
    ):
        (cpu_dir / f"cpu{cpu}/cpufreq").mkdir(parents=True)
        (cpu_dir / f"cpu{cpu}/cpufreq/cpuinfo_max_freq").write_text(f"{khz}\n")
        (cpu_dir / f"cpu{cpu}/topology").mkdir()
        (cpu_dir / f"cpu{cpu}/topology/physical_package_id").write_text(f"{package}\n")
    p = probe(tmp_path)
    assert (p.family, p.model, p.soc, p.machine) == ("arm", "Radxa ROCK 5B", "rk3588", "aarch64")
    assert [(c.core_type, c.cpus, c.max_mhz) for c in p.cpu.clusters] == [
        ("Cortex-A55", (0, 1, 2, 3), 1800.0),
        ("Cortex-A76", (4, 5), 2400.0),
        ("Cortex-A76", (6, 7), 2400.0),
    ]
    assert not p.gpu.present


def test_live_probe_asks_torch_when_it_is_loaded():
    torch = pytest.importorskip("torch")
    probe.cache_clear()
    p = probe()
    assert p.gpu.cuda_usable == torch.cuda.is_available()
    probe.cache_clear()


def test_fifo_or_directory_in_place_of_a_file_does_not_block(tmp_path):
    root = _copy("jetson-nano", tmp_path)
    (root / "proc/meminfo").unlink()
    os.mkfifo(root / "proc/meminfo")  # opening this for reading would wait for a writer
    (root / "etc/nv_tegra_release").unlink()
    (root / "etc/nv_tegra_release").mkdir()
    p = probe(root)
    assert (p.memory.total_bytes, p.l4t_release, p.board_id) == (None, None, "p3448-0000")


def test_cpuset_outside_the_online_cpus_is_ignored(tmp_path):
    root = _copy("container-cgroup2", tmp_path)
    (root / "sys/fs/cgroup/cpuset.cpus.effective").write_text("100-163\n")
    (root / "sys/fs/cgroup/cpu.max").write_text("max 100000\n")
    p = probe(root)
    assert (p.cpu.online_count, p.cpu.usable_count, p.cpu.affinity_count) == (20, 20, None)


def test_limits_at_the_cgroup_root_without_a_membership_file(tmp_path):
    for rel, text in {
        "sys/fs/cgroup/cpu.max": "200000 100000\n",
        "sys/fs/cgroup/memory.max": f"{512 << 20}\n",
        "sys/devices/system/cpu/online": "0-7\n",
    }.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    p = probe(tmp_path)
    assert (p.cpu.usable_count, p.memory.limit_bytes) == (2, 512 << 20)


@pytest.mark.parametrize("system_cv2", [None, "dir", "ext"])
def test_pip_cv2_shadowing_a_system_cv2(tmp_path, system_cv2):
    cv2 = pytest.importorskip("cv2")
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    packages = tmp_path / f"usr/local/lib/python{version}/dist-packages"
    packages.mkdir(parents=True)
    if system_cv2 == "dir":  # JetPack's layout: a cv2 package directory
        (packages / "cv2").mkdir()
    elif system_cv2 == "ext":  # Debian's layout: one extension module for this Python
        (packages / f"cv2{sysconfig.get_config_var('EXT_SUFFIX')}").write_bytes(b"")
    (packages / "cv2.cpython-39-other.so").write_bytes(b"")  # another Python's: not a rival
    info = probe(tmp_path, live=True).opencv
    assert info is not None and info.version == cv2.__version__
    assert info.shadows_system == (system_cv2 is not None)
    assert (info.system_path is not None) == (system_cv2 is not None)


def test_pi_zero_arm1176_is_armv6l_although_cpuinfo_says_architecture_7(tmp_path):
    # Raspberry Pi Zero W (BCM2835, ARM1176JZF-S) on a 32-bit kernel.
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text(
        "processor\t: 0\nmodel name\t: ARMv6-compatible processor rev 7 (v6l)\n"
        "BogoMIPS\t: 997.08\nFeatures\t: half thumb fastmult vfp edsp java tls\n"
        "CPU implementer\t: 0x41\nCPU architecture: 7\nCPU variant\t: 0x0\n"
        "CPU part\t: 0xb76\nCPU revision\t: 7\n\n"
        "Hardware\t: BCM2835\nRevision\t: 9000c1\nModel\t\t: Raspberry Pi Zero W Rev 1.1\n"
    )
    p = probe(tmp_path)
    assert (p.family, p.model, p.machine, p.soc) == (
        "raspberry_pi",
        "Raspberry Pi Zero W",
        "armv6l",
        "BCM2835",
    )
    assert [c.core_type for c in p.cpu.clusters] == ["ARM1176"]


def test_jetson_power_mode_from_nvpmodel_status_and_conf(tmp_path):
    board = tmp_path / "orin"
    shutil.copytree(FIXTURES / "jetson-orin-nano", board, symlinks=True)
    assert probe(board).power_mode is None  # the capture has no nvpmodel files
    (board / "var/lib/nvpmodel").mkdir(parents=True)
    (board / "var/lib/nvpmodel/status").write_text("pmode:0002\n")
    assert probe(board).power_mode == "2"
    (board / "etc/nvpmodel.conf").write_text(
        "< POWER_MODEL ID=0 NAME=MAXN >\nCPU_ONLINE CORE_0 1\n< POWER_MODEL ID=2 NAME=15W >\n"
    )
    assert probe(board).power_mode == "15W (2)"
    (board / "var/lib/nvpmodel/status").write_bytes(b"\xff\xfe pmode: garbage")
    assert probe(board).power_mode is None


def test_power_mode_is_only_a_jetson_fact(tmp_path):
    board = tmp_path / "pi"
    shutil.copytree(FIXTURES / "rpi4", board, symlinks=True)
    (board / "var/lib/nvpmodel").mkdir(parents=True)
    (board / "var/lib/nvpmodel/status").write_text("pmode:0000\n")
    assert probe(board).power_mode is None
