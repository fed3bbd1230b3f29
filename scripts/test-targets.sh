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
R=$CACHE/$SUITE-arm64
TORCH_SPEC="torch==2.1.*"
VENV=/opt/venv      # inside the root
SRC=/src/edgeload   # inside the root: a fresh copy of this checkout each run
WHEELS=/opt/wheels  # inside the root: what the install test may install, offline

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
    tests/autotune/test_autotune.py::test_dataset_autotune_from_a_factory   # a short autotune
)

log_tag=test-targets
source "$repo/scripts/_log.sh"

timed() {  # timed NAME CMD...: run CMD, log how long it took
    local name=$1 t0=$SECONDS
    shift
    "$@"
    say "$name: $((SECONDS - t0)) s"
}

# --- the root's mounts and environment --------------------------------------------------
mount_root() {
    # / bound onto itself so that `unshare -m` (used by the shm tests' helpers) works inside
    mountpoint -q "$R" || mount --bind "$R" "$R"
    # Test what is there, not `mountpoint`: a proc mounted on the root before the bind
    # above still shows as a mount point, yet the bind hides it and /proc is empty inside.
    [ -e "$R/proc/self/stat" ] || mount -t proc proc "$R/proc"
    [ -e "$R/sys/kernel" ] || mount -t sysfs -o ro sysfs "$R/sys"
    mkdir -p "$R/dev/shm"
    mountpoint -q "$R/dev/shm" || mount -t tmpfs -o mode=1777,size=2g tmpfs "$R/dev/shm"
    # name resolution and the host's CA bundle (a proxy's CA reaches pip this way)
    cp /etc/hosts /etc/resolv.conf "$R/etc/"
    if [ -d "$R/etc/ssl/certs" ] && [ -f /etc/ssl/certs/ca-certificates.crt ]; then
        cp /etc/ssl/certs/ca-certificates.crt "$R/etc/ssl/certs/"
    fi
}
umount_root() {
    local m
    for m in dev/shm sys proc ""; do
        # a process of the tests may still be leaving: wait a moment, then detach lazily
        if mountpoint -q "$R/$m" 2>/dev/null; then
            umount "$R/$m" 2>/dev/null || { sleep 2; umount "$R/$m" 2>/dev/null; } || umount -l "$R/$m"
        fi
    done
}
# A clean environment: the host's PIP_FIND_LINKS, pip.conf and PYTHON* settings stay out.
ROOT_ENV=(HOME=/root LANG=C.UTF-8 TERM=dumb DEBIAN_FRONTEND=noninteractive
    PIP_DEFAULT_TIMEOUT=180 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_CERT=/etc/ssl/certs/ca-certificates.crt)
in_root() {
    chroot "$R" /usr/bin/env -i "${ROOT_ENV[@]}" \
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"
}
in_venv() {  # in_venv SECONDS CMD...: in the venv and the source copy, killed after SECONDS
    local limit=$1
    shift
    timeout -k 10 "$limit" chroot "$R" /usr/bin/env -i "${ROOT_ENV[@]}" \
        PATH="$VENV/bin:/usr/bin:/bin" VIRTUAL_ENV="$VENV" PYTHONPATH="$SRC" \
        EDGELOAD_REQUIRE_FFMPEG=1 EDGELOAD_REQUIRE_GSTREAMER=1 \
        /bin/sh -c 'cd "$0" && exec "$@"' "$SRC" "$@"
}

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

pick_mirror() {
    local m
    for m in "${MIRRORS[@]}"; do
        if retry python3 -c 'import sys, urllib.request
urllib.request.urlopen(sys.argv[1] + "/dists/" + sys.argv[2] + "/InRelease", timeout=60)' "$m" "$SUITE"
        then
            MIRROR=$m
            return 0
        fi
        say "$m has no $SUITE; trying the next mirror"
    done
    die "no mirror has Debian $SUITE: ${MIRRORS[*]}"
}

build_rootfs() {
    [ -e "$R/.edgeload-base-done" ] && return 0
    pick_mirror
    say "debootstrap $SUITE arm64 into $R"
    umount_root
    rm -rf "$R"
    mkdir -p "$CACHE"
    # download and unpack only (native); a failed try starts again from an empty directory
    retry sh -c 'rm -rf "$1" && debootstrap --arch=arm64 --variant=minbase --foreign "$2" "$1" "$3"' \
        _ "$R" "$SUITE" "$MIRROR"
    timed "debootstrap second stage (emulated)" chroot "$R" /debootstrap/debootstrap --second-stage
    touch "$R/.edgeload-base-done"
}

build_packages() {
    if in_root dpkg -s "${APT_PKGS[@]}" >/dev/null 2>&1; then return 0; fi
    pick_mirror
    # bullseye-security is left out: the mirror lists it but answers 404 for its pool files
    printf 'deb %s %s main\ndeb %s %s-updates main\n' "$MIRROR" $SUITE "$MIRROR" $SUITE \
        > "$R/etc/apt/sources.list"
    printf '#!/bin/sh\nexit 101\n' > "$R/usr/sbin/policy-rc.d"  # no services start inside
    chmod +x "$R/usr/sbin/policy-rc.d"
    mount_root
    retry in_root apt-get update -qq
    # --download-only first, retried; the emulated install itself is not a download
    retry in_root apt-get install -y -qq --no-install-recommends --download-only "${APT_PKGS[@]}"
    in_root dpkg --configure -a  # an install interrupted on an earlier run
    timed "apt install (emulated)" in_root apt-get install -y -qq --no-install-recommends \
        "${APT_PKGS[@]}" >/dev/null
    in_root apt-get clean
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
copy_source() {
    rm -rf "$R$SRC"
    mkdir -p "$R$SRC"
    if git -C "$repo" rev-parse --git-dir >/dev/null 2>&1; then
        git -C "$repo" ls-files -z --cached --others --exclude-standard \
            | (cd "$repo" && tar --null --ignore-failed-read -T - -cf -) | tar -xf - -C "$R$SRC"
    else
        tar -C "$repo" --exclude='.venv*' --exclude=.git -cf - . | tar -xf - -C "$R$SRC"
    fi
}

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

# Installing edgeload into a --system-site-packages venv, as on a board, keeps the system's
# numpy and psutil: only edgeload itself and tomli (absent from bullseye) may be added.
# --no-index: a requirement the system does not meet has nothing to upgrade to, and fails.
install_test() {
    in_venv 600 sh -ec '
        unset PYTHONPATH  # the installed wheel, not the source copy
        rm -rf /tmp/dist /tmp/board-venv
        python -m pip wheel -q --no-deps --no-build-isolation -w /tmp/dist .
        python3 -m venv --system-site-packages /tmp/board-venv
        vpy=/tmp/board-venv/bin/python
        sp=$($vpy -c "import sysconfig; print(sysconfig.get_paths()[\"purelib\"])")
        show="import numpy, psutil; print(numpy.__version__, numpy.__file__, psutil.__version__)"
        before=$($vpy -c "$show")
        ls "$sp" | sort > /tmp/site-before
        $vpy -m pip install -q --no-index --find-links "$1" /tmp/dist/edgeload-*.whl
        after=$($vpy -c "$show")
        ls "$sp" | sort > /tmp/site-after
        added=$(comm -13 /tmp/site-before /tmp/site-after | grep -vE "^(edgeload|tomli)[-.]|^(edgeload|tomli)$" || true)
        $vpy -c "import edgeload, numpy; print(\"edgeload\", edgeload.__version__, \"installed over the system numpy\", numpy.__version__)"
        rm -rf /tmp/dist /tmp/board-venv /tmp/site-before /tmp/site-after
        [ "$before" = "$after" ] || { echo "numpy/psutil changed: $before -> $after"; exit 1; }
        [ -z "$added" ] || { echo "the install added more than edgeload and tomli:" $added; exit 1; }
        case $before in */usr/lib/python3/dist-packages/*) ;; *) echo "numpy is not the system one: $before"; exit 1 ;; esac
    ' sh "$WHEELS"
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

if [ "${EDGELOAD_SKIP_TARGETS:-0}" = 1 ]; then
    say "EDGELOAD_SKIP_TARGETS=1: the emulated arm64 target is NOT tested"
    exit 0
fi
[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot and mounts): sudo $0 $*"
# One run at a time per cache: a second waits (a build can take 20 minutes).
mkdir -p "$CACHE"
exec 8>"$CACHE/.lock"
flock -w 3600 8 || die "another test-targets.sh holds $CACHE/.lock"
trap umount_root EXIT

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
