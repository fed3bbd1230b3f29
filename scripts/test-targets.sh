#!/usr/bin/env bash
# Run part of the test suite on an emulated arm64 board stack: Debian bullseye's Python 3.9,
# numpy 1.19, OpenCV 4.5.1 with GStreamer, and PyPI's aarch64 CPU torch 2.1 - the closest
# root to JetPack 5 (Python 3.8, numpy 1.17, OpenCV 4.5.4, torch 1.11-2.1) built only from
# Debian's packages and PyPI.  Needs root (debootstrap, chroot, mounts) and network on the
# first run.
#
#   scripts/test-targets.sh            build the root if needed, then test in it
#   scripts/test-targets.sh build      only build or update the cached root
#   scripts/test-targets.sh test       only test (the root must be built)
#   scripts/test-targets.sh shell      a shell in the root's venv, in the copied tree
#
# The root is cached outside the clone, in $EDGELOAD_TARGETS_CACHE (default
# /var/cache/edgeload-targets): 17-25 minutes to build from scratch on 2 cores (25 on a
# busy shared box), seconds when cached; the tests take 5-10 minutes under emulation.  Each build step checks what is already there, so an interrupted build
# resumes.  Every download is retried; a failure after the retries, or any failing test,
# fails the script.  Extra arguments after `test` go to pytest.  EDGELOAD_SKIP_TARGETS=1
# skips it all, loudly (for a machine that cannot run emulated binaries; not for CI).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${EDGELOAD_TARGETS_CACHE:-/var/cache/edgeload-targets}
# bullseye moves to archive.debian.org when its LTS ends; the first mirror that has it wins
MIRRORS=(${EDGELOAD_TARGETS_MIRROR:-http://deb.debian.org/debian http://archive.debian.org/debian})
MIRROR=${MIRRORS[0]}
SUITE=bullseye
ARCH=arm64
R=$CACHE/$SUITE-$ARCH
TORCH_SPEC="torch==2.1.*"
VENV=/opt/venv      # inside the root
SRC=/src/edgeload   # inside the root: a fresh copy of this checkout each run
WHEELS=/opt/wheels  # inside the root: what the install test may install, offline
TEST_ENV=(EDGELOAD_REQUIRE_FFMPEG=1 EDGELOAD_REQUIRE_GSTREAMER=1)

# Python, numpy, OpenCV (with GStreamer), psutil and ffmpeg from Debian, as a board has them.
APT_PKGS=(python3 python3-venv python3-pip python3-numpy python3-psutil python3-opencv
    ca-certificates ffmpeg gstreamer1.0-plugins-base gstreamer1.0-plugins-good
    gstreamer1.0-plugins-bad gstreamer1.0-plugins-ugly gstreamer1.0-libav gstreamer1.0-tools)
PIP_PKGS=("$TORCH_SPEC" "pytest>=7.4,<9" "pytest-timeout>=2.1" "hypothesis>=6.80" "tomli>=1.1"
    "hatchling>=1.18")

# The named part of the suite: what a board exercises first.  Under emulation Python runs
# 10-20x slower, so the slow-marked tests stay out and each test may take 5 minutes.
TARGET_TESTS=(
    tests/test_compat.py                      # the 3.8 stand-ins, on a real 3.9
    tests/test_floor.py
    tests/platform/test_probe.py              # probe on the fixture trees: Jetson, Pi, x86
    tests/platform/test_orin_nano_jetpack5.py
    tests/platform/test_profile.py            # every platforms/*.toml loads: tomli below 3.11
    tests/platform/test_plan.py
    tests/cli/test_probe_fallbacks.py         # probe lists torch 2.1's and OpenCV 4.5.1's gaps
    tests/dataset/test_loader.py              # thread and process workers, torch parity
    tests/dataset/test_worker_ctx.py          # thread workers without torch's worker._RNG
    tests/dataset/test_resume.py              # resume
    tests/video/test_source.py                # VideoSource and its reader, files and loopback
    tests/video/test_cv_features.py           # the stall guard, for real on OpenCV 4.5.1
    tests/video/test_streams.py               # StreamLoader on a file
    tests/video/test_gst.py::test_file_decodes_through_a_gstreamer_pipeline
    tests/video/test_gst.py::test_raw_pipeline_is_a_live_source
    tests/tuning/test_autotune.py::test_dataset_autotune_from_a_factory   # a short autotune
)

log_tag=test-targets
source "$repo/scripts/_log.sh"
source "$repo/scripts/_root.sh"

# --- building the root ------------------------------------------------------------------
host_tools() {
    if ! command -v qemu-aarch64-static >/dev/null || ! command -v debootstrap >/dev/null \
        || ! command -v update-binfmts >/dev/null; then
        say "installing qemu-user-static, binfmt-support and debootstrap on the host"
        retry apt-get update -qq
        retry env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            qemu-user-static binfmt-support debootstrap >/dev/null
    fi
    mountpoint -q /proc/sys/fs/binfmt_misc || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
    [ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || update-binfmts --import qemu-aarch64 || true
    update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || true
    grep -q '^enabled' /proc/sys/fs/binfmt_misc/qemu-aarch64 \
        || die "binfmt_misc has no enabled qemu-aarch64 entry: arm64 programs cannot run here"
    # F: the kernel opens the emulator at registration, so it works inside the chroot
    grep -q '^flags: .*F' /proc/sys/fs/binfmt_misc/qemu-aarch64 \
        || die "the qemu-aarch64 binfmt entry lacks the F flag; reinstall qemu-user-static"
}

build_venv() {
    mount_root
    [ -x "$R$VENV/bin/python" ] || in_root python3 -m venv --system-site-packages "$VENV"
    local ok='import torch, pytest, pytest_timeout, hypothesis, tomli, hatchling'
    if ! in_root "$VENV/bin/python" -c "$ok" 2>/dev/null; then
        say "pip install ${PIP_PKGS[*]} into $VENV (emulated)"
        retry in_root "$VENV/bin/python" -m pip install -q "${PIP_PKGS[@]}"
    fi
    # the install test's one missing dependency, kept so that test runs offline
    if ! ls "$R$WHEELS"/tomli-*.whl >/dev/null 2>&1; then
        retry in_root "$VENV/bin/python" -m pip download -q --no-deps -d "$WHEELS" "tomli>=1.1"
    fi
}

build() {
    local t0=$SECONDS
    host_tools
    build_rootfs
    build_packages
    build_venv
    say "root ready in $((SECONDS - t0)) s: $R"
}

# --- testing in it ----------------------------------------------------------------------
versions() {
    in_venv 300 python - <<'EOF'
import platform, re, sys
import cv2, numpy, torch
gst = re.search(r"GStreamer:\s*(\S+)", cv2.getBuildInformation())
print(f"{platform.machine()} Python {sys.version.split()[0]}, numpy {numpy.__version__}, "
      f"torch {torch.__version__}, OpenCV {cv2.__version__} (GStreamer {gst.group(1) if gst else '?'})")
if platform.machine() != "aarch64":
    sys.exit("not running as aarch64: binfmt/qemu is not in effect")
EOF
}

run_tests() {
    [ -e "$R/.edgeload-base-done" ] && [ -x "$R$VENV/bin/python" ] \
        || die "no built root at $R: run scripts/test-targets.sh build first"
    local t0=$SECONDS
    host_tools
    mount_root
    copy_source
    timed "versions" versions
    timed "install over the system numpy" install_test
    say "pytest on the emulated root: ${TARGET_TESTS[*]} $*"
    timed "pytest (emulated)" in_venv 1800 python -m pytest -q -p no:cacheprovider \
        -o timeout=300 -m "not slow" --basetemp=/tmp/edgeload-pytest -rfEs --durations=10 \
        "${TARGET_TESTS[@]}" "$@"
    say "tests on the emulated root passed in $((SECONDS - t0)) s"
}

locked() {  # on a shared machine, EDGELOAD_TARGETS_TEST_LOCK=FILE runs the tests under flock FILE
    if [ -z "${EDGELOAD_TARGETS_TEST_LOCK:-}" ]; then
        "$@"
        return
    fi
    local t0=$SECONDS
    exec 7>>"$EDGELOAD_TARGETS_TEST_LOCK"
    flock 7
    say "got $EDGELOAD_TARGETS_TEST_LOCK after $((SECONDS - t0)) s"
    "$@"
    flock -u 7
}

take_root EDGELOAD_SKIP_TARGETS "the emulated arm64 target" "$@"

what=${1:-all}
[ $# -gt 0 ] && shift
case $what in
    # (never `build && ...`: bash ignores set -e inside a function run as part of && or ||)
    all)
        build
        locked run_tests "$@"
        ;;
    build) build ;;
    test) locked run_tests "$@" ;;
    shell)
        mount_root
        copy_source
        in_venv 86400 bash
        ;;
    *) die "unknown command '$what': use build, test, shell or nothing" ;;
esac
