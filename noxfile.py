"""The stack matrix: edgeload's test suite on each software stack a board ships.

    nox -l                                  the sessions, one per stack
    nox -s jetpack5                         one stack (here both of its torch versions)
    nox -s trixie -- tests/test_exports.py  arguments after -- replace the test selection
    nox -s trixie -- shell                  (root stacks) a shell in the root; `build` builds it

`.ci/run` runs scripts/test.sh, then these sessions. What a session builds is cached outside
the clone, under $EDGELOAD_CACHE (default /var/cache when writable, else ~/.cache): the venvs
in edgeload-nox, the Debian roots in edgeload-trixie and edgeload-targets. A second run takes
only the tests. Each session prints the versions it runs and fails at once when its venv or
root holds others (scripts/stack_check.py).

A stack's Python, numpy, psutil and OpenCV are the board's; the test tools are installed
against a constraints file of those pins, so they never move the stack. Where nox cannot find
a stack's Python it skips the session, except under CI (CI=true), where that is an error.
"""

from __future__ import annotations

import glob
import os
import subprocess
import time
from pathlib import Path

import nox
from nox.command import CommandFailed

REPO = Path(__file__).resolve().parent
CACHE = Path(
    os.environ.get("EDGELOAD_CACHE")
    or ("/var/cache" if os.access("/var/cache", os.W_OK) else Path.home() / ".cache")
)
nox.options.envdir = str(CACHE / "edgeload-nox")
nox.options.reuse_venv = "yes"
nox.options.default_venv_backend = "venv"  # the stack's own Python makes its venv

TOOLS = ["pytest>=7.4,<9", "pytest-timeout>=2.1", "pytest-xdist>=3.0", "hypothesis>=6.80"]
# Two test processes, each file whole on one (module fixtures are made once)
PYTEST = [
    *("-n", os.environ.get("EDGELOAD_TEST_WORKERS", "2"), "--dist", "loadfile"),
    *("-p", "no:cacheprovider", "-p", "no:benchmark"),
]
# A missing real component fails a root's tests, as in .ci/run
REQUIRE_ALL = "EDGELOAD_REQUIRE_FFMPEG=1 EDGELOAD_REQUIRE_GSTREAMER=1 EDGELOAD_REQUIRE_RTSP=1"


def find_python(version: str, env_var: str) -> str:
    """The interpreter for a stack: $env_var, else pythonX.Y on PATH, else pyenv's X.Y.*;
    the bare version when none runs, which nox then reports missing."""
    pyenv = os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))
    candidates = [os.environ.get(env_var, ""), f"python{version}"]
    candidates += sorted(glob.glob(f"{pyenv}/versions/{version}.*/bin/python{version}"))
    for candidate in filter(None, candidates):
        try:
            out = subprocess.run(
                [candidate, "-c", "import sys, venv; print('%d.%d' % sys.version_info[:2])"],
                capture_output=True,
                text=True,
                timeout=30,
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.returncode == 0 and out.stdout.strip() == version:
            return candidate
    return version


def install(session: nox.Session, *args: str) -> None:
    """session.install, tried again on a failure: PyPI and mirrors do flake."""
    for delay in (15, 30, 60, None):
        try:
            session.install(*args)
            return
        except CommandFailed:
            if delay is None:
                raise
            session.log(f"pip install failed; again in {delay} s")
            time.sleep(delay)


def install_pinned(session: nox.Session, pins: list[str], *specs: str) -> None:
    """Install specs with pins as the constraints: nothing may move a pinned package."""
    constraints = Path(session.virtualenv.location, "pins.txt")
    constraints.write_text("".join(f"{pin}\n" for pin in pins))
    install(session, "-c", str(constraints), *specs)


def run_pytest(session: nox.Session, *default: str, env: dict[str, str] | None = None) -> None:
    """The suite (or the arguments after --) on the clone's edgeload: PYTHONPATH puts the tree
    first, and the CLI tests' `python -m edgeload` finds it the same way."""
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    selection = session.posargs or list(default)
    session.run(
        "python", "-m", "pytest", *PYTEST, *selection, env={"PYTHONPATH": path, **(env or {})}
    )


def check_stack(session: nox.Session, python: str, pins: list[str]) -> None:
    """scripts/stack_check.py: the venv holds the versions ``pins`` name (an OpenCV wheel's
    fourth number is its build, not OpenCV's version)."""
    flags = {"numpy": "--numpy", "psutil": "--psutil", "torch": "--torch",
             "opencv-python-headless": "--opencv"}  # fmt: skip
    args = ["--python", python]
    for pin in pins:
        name, version = pin.split("==")
        args += [flags[name], ".".join(version.split(".")[:3])]
    session.run("python", "scripts/stack_check.py", "check", *args)


# --- stacks built by nox: a venv of the stack's Python --------------------------------------

JETPACK5 = [  # Ubuntu 20.04's numpy and psutil, as JetPack 5 has them; JetPack 5's OpenCV
    "numpy==1.17.4",
    "psutil==5.5.1",
    "opencv-python-headless==4.5.4.60",
]


@nox.session(python=find_python("3.8", "EDGELOAD_PY38"))
@nox.parametrize(
    "torch",
    [nox.param("1.11.0", id="torch1.11"), nox.param("1.12.1", id="torch1.12")],
)
def jetpack5(session: nox.Session, torch: str) -> None:
    """JetPack 5: Python 3.8, numpy 1.17.4, OpenCV 4.5.4, torch 1.11 (all) or 1.12 (part)."""
    # PyPI's builds of the torch releases JetPack 5 shipped: 1.11.0 (JetPack 5.0, edgeload's
    # floor) runs the whole suite; 1.12.1 (5.0.2) the DataLoader and GPU-memory tests, where
    # the two differ. On x86 they run on the CPU.
    pins = [*JETPACK5, f"torch=={torch}"]
    install_pinned(
        session, pins, *pins, "typing-extensions", "tomli>=1.1", *TOOLS, "matplotlib>=3.5"
    )
    check_stack(session, "3.8", pins)
    if torch == "1.11.0":
        run_pytest(session)
    else:
        run_pytest(session, "tests/dataset", "tests/cuda")


# JetPack 6.2's torch and Ubuntu 22.04's numpy and psutil. OpenCV is 4.9, not JetPack 6's 4.8:
# PyPI's 4.8.0.76 and 4.8.1.78 do not import with numpy 1.21 (cv2.typing subscripts
# numpy.dtype, which numpy 1.22 added). PyPI's x86_64 torch is a CUDA build (with its nvidia-*
# wheels, about 2.5 GB), as JetPack's is; here it runs on the CPU.
JETPACK6 = ["numpy==1.21.5", "psutil==5.9.0", "opencv-python-headless==4.9.0.80", "torch==2.6.0"]


@nox.session(python=find_python("3.10", "EDGELOAD_PY310"))
def jetpack6(session: nox.Session) -> None:
    """JetPack 6: Python 3.10, numpy 1.21.5, psutil 5.9.0, OpenCV 4.9.0, torch 2.6.0."""
    # numpy 1.21 holds matplotlib at 3.8, which calls pyparsing's camelCase names: pyparsing
    # 3.3 deprecates them (a warning, so an error in the suite)
    tools = [*TOOLS, "matplotlib>=3.5", "pyparsing<3.3"]
    install_pinned(session, JETPACK6, *JETPACK6, "typing-extensions", "tomli>=1.1", *tools)
    check_stack(session, "3.10", JETPACK6)
    run_pytest(session)


# --- Debian's own Python: Raspberry Pi OS Bookworm ----------------------------------------------


@nox.session(python="/usr/bin/python3", venv_params=["--system-site-packages"])
def bookworm(session: nox.Session) -> None:
    """Pi OS Bookworm: Debian 12's Python 3.11, numpy 1.24, OpenCV 4.6 + GStreamer."""
    # The venv sees Debian's python3-opencv (built with GStreamer), numpy and psutil, and adds
    # only the CPU torch wheel and the test tools, pinned so that none of Debian's is replaced.
    # scripts/test.sh installs python3-opencv when root; without it this skips, unless
    # EDGELOAD_REQUIRE_GSTREAMER=1 (set by .ci/run).
    has_gst = subprocess.run(
        [
            "/usr/bin/python3",
            "-c",
            "import cv2, re, sys; "
            "sys.exit(not re.search(r'GStreamer:\\s+YES', cv2.getBuildInformation()))",
        ],
        capture_output=True,
    )
    if has_gst.returncode != 0:
        missing = "/usr/bin/python3 has no OpenCV with GStreamer (Debian's python3-opencv)"
        if os.environ.get("EDGELOAD_REQUIRE_GSTREAMER") == "1":
            session.error(f"{missing}, and EDGELOAD_REQUIRE_GSTREAMER=1")
        session.skip(missing)
    pins = session.run("python", "scripts/stack_check.py", "pins", silent=True)
    assert isinstance(pins, str)
    install_pinned(session, pins.split(), "torch==2.13.0", *TOOLS, "matplotlib>=3.5")
    session.run("python", "scripts/stack_check.py", "check", "--system-numpy", "--gstreamer")
    run_pytest(session, env={"EDGELOAD_REQUIRE_GSTREAMER": "1"})


# --- Debian roots: scripts/_root.sh builds them (debootstrap) and tests in them (chroot) ----


# Python, numpy, psutil, OpenCV (with GStreamer) and ffmpeg from Debian, as a board has them
DEBIAN_STACK = (
    "python3 python3-venv python3-pip python3-numpy python3-psutil python3-opencv"
    " ca-certificates ffmpeg gstreamer1.0-plugins-base gstreamer1.0-plugins-good"
    " gstreamer1.0-plugins-bad gstreamer1.0-plugins-ugly gstreamer1.0-libav gstreamer1.0-tools"
)


def in_root(session: nox.Session, pytest: list[str], default: list[str], **root: str) -> None:
    """`bash scripts/_root.sh test` with this stack, or build/shell when that is the argument."""
    if session.posargs[:1] in (["build"], ["shell"]):
        command = session.posargs[:1]
    else:
        command = ["test", "python", "-m", "pytest", *pytest, *(session.posargs or default)]
    env = {f"ROOT_{name.upper()}": value for name, value in root.items()}
    session.run("bash", str(REPO / "scripts/_root.sh"), *command, env=env, external=True)


@nox.session(python=False)
def trixie(session: nox.Session) -> None:
    """Pi OS Trixie: a Debian 13 root, Python 3.13, numpy 2.2, OpenCV 4.10 + GStreamer."""
    # This machine's architecture (amd64 here, so torch is PyPI's CUDA build, run on the CPU):
    # the software stack is what this checks; arm64 runs the suite's board part on arm64.
    # From nothing: about 1 minute for debootstrap, 2 for the packages, 2 for the venv.
    in_root(
        session,
        [*PYTEST, "--basetemp=/tmp/edgeload-pytest"],
        [],
        name="trixie",
        cache=str(CACHE / "edgeload-trixie"),
        suite="trixie",
        mirrors="http://deb.debian.org/debian",
        # The board's stack, and matplotlib, gst-rtsp-server and libcamera's tool and
        # GStreamer element, as Raspberry Pi OS has them (libcamera finds no camera here)
        apt=f"{DEBIAN_STACK} python3-matplotlib python3-gi gir1.2-gst-rtsp-server-1.0"
        " libcamera-tools gstreamer1.0-libcamera",
        pip=f"torch==2.6.0 {' '.join(TOOLS)} hatchling>=1.18",
        check="--python 3.13 --torch 2.6.0 --system-numpy --gstreamer",
        test_env=f"{REQUIRE_ALL} EDGELOAD_REQUIRE_LIBCAMERA=1",
    )


# The board part of the suite: what a board exercises first. Under emulation Python runs
# 10-20x slower, so the slow-marked tests stay out and each test may take 5 minutes.
ARM64_TESTS = [
    "tests/test_compat.py",  # the 3.8 stand-ins, on a real 3.9
    "tests/test_floor.py",
    "tests/platform/test_probe.py",  # probe on the fixture trees: Jetson, Pi, x86
    "tests/platform/test_orin_nano_jetpack5.py",
    "tests/platform/test_profile.py",  # every platforms/*.toml loads: tomli below 3.11
    "tests/platform/test_plan.py",
    "tests/cli/test_probe_fallbacks.py",  # probe lists torch 2.1's and OpenCV 4.5.1's gaps
    "tests/dataset/test_loader.py",  # thread and process workers, torch parity
    "tests/dataset/test_worker_ctx.py",  # thread workers without torch's worker._RNG
    "tests/dataset/test_resume.py",  # resume
    "tests/video/test_source.py",  # VideoSource and its reader, files and loopback
    "tests/video/test_cv_features.py",  # the stall guard, for real on OpenCV 4.5.1
    "tests/video/test_native_log.py",  # FFmpeg's log hook: a va_list through ctypes on arm64
    "tests/video/test_streams.py",  # StreamLoader on a file
    "tests/video/test_gst.py::test_file_decodes_through_a_gstreamer_pipeline",
    "tests/video/test_gst.py::test_raw_pipeline_is_a_live_source",
    "tests/tuning/test_autotune.py::test_dataset_autotune_from_a_factory",  # a short autotune
]


@nox.session(python=False)
def arm64(session: nox.Session) -> None:
    """Emulated arm64 Debian 11 root: Python 3.9, numpy 1.19, OpenCV 4.5.1, torch 2.1."""
    # The closest root to JetPack 5 built only from Debian's packages and PyPI. From nothing,
    # 17-25 minutes on 2 cores (apt under qemu is most of it); the tests take 5-10 minutes.
    in_root(
        session,
        ["-q", "-p", "no:cacheprovider", "-o", "timeout=300", "-m", "not slow",
         "--basetemp=/tmp/edgeload-pytest", "-rfEs", "--durations=10"],
        ARM64_TESTS,
        name="arm64",
        cache=str(CACHE / "edgeload-targets"),
        suite="bullseye",
        arch="arm64",
        # bullseye moves to archive.debian.org when its LTS ends; the first that has it wins
        mirrors="http://deb.debian.org/debian http://archive.debian.org/debian",
        apt=DEBIAN_STACK,
        pip="torch==2.1.* pytest>=7.4,<9 pytest-timeout>=2.1 hypothesis>=6.80 tomli>=1.1"
        " hatchling>=1.18",
        wheels="tomli>=1.1",  # the install check's one missing dependency, kept offline
        check="--python 3.9 --machine aarch64 --system-numpy --gstreamer",
        test_env="EDGELOAD_REQUIRE_FFMPEG=1 EDGELOAD_REQUIRE_GSTREAMER=1",
    )  # fmt: skip
