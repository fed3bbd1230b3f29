#!/usr/bin/env bash
# Run the test suite on Raspberry Pi OS Trixie's software: Debian 13's own Python 3.13,
# numpy 2.2, psutil 7 and OpenCV 4.10 with GStreamer 1.26 (python3-opencv), gst-rtsp-server
# and ffmpeg, in a Debian trixie root built with debootstrap, plus PyPI's torch 2.6.0 and
# the test tools in a --system-site-packages venv with Debian's packages pinned, as a Pi
# user installs torch. The root is this machine's architecture (amd64 here, so torch is
# PyPI's CUDA build, about 2.5 GB with its nvidia-* wheels, run on the CPU): the software
# stack is what this checks; scripts/test-targets.sh runs the suite's board part on arm64.
# Needs root (debootstrap, chroot, mounts) and network on the first run.
#
#   scripts/test-trixie.sh [pytest args]   build the root if needed, then the whole suite
#   scripts/test-trixie.sh build           only build or update the cached root
#   scripts/test-trixie.sh shell           a shell in the root's venv, in the copied tree
#
# The root is cached outside the clone, in $EDGELOAD_TRIXIE_CACHE (default
# /var/cache/edgeload-trixie): about 1 minute for debootstrap, 2 for the packages and 2
# for the venv from scratch (downloads included), seconds when cached; the suite takes
# about 3 minutes.
# EDGELOAD_SKIP_TRIXIE=1 skips it all, loudly (not for CI).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${EDGELOAD_TRIXIE_CACHE:-/var/cache/edgeload-trixie}
MIRRORS=(${EDGELOAD_TRIXIE_MIRROR:-http://deb.debian.org/debian})
MIRROR=${MIRRORS[0]}
SUITE=trixie
ARCH=$(dpkg --print-architecture 2>/dev/null || echo amd64)
R=$CACHE/$SUITE-$ARCH
TORCH=2.6.0
VENV=/opt/venv      # inside the root
SRC=/src/edgeload   # inside the root: a fresh copy of this checkout each run
WHEELS=/opt/wheels  # inside the root: what the install test may install, offline (nothing)
# A missing real component fails here, as in .ci/run
TEST_ENV=(EDGELOAD_REQUIRE_FFMPEG=1 EDGELOAD_REQUIRE_GSTREAMER=1 EDGELOAD_REQUIRE_RTSP=1)

# Python, numpy, psutil, OpenCV (with GStreamer), matplotlib, gst-rtsp-server and ffmpeg
# from Debian, as Raspberry Pi OS has them.
APT_PKGS=(python3 python3-venv python3-pip python3-numpy python3-psutil python3-opencv
    python3-matplotlib python3-gi gir1.2-gst-rtsp-server-1.0 ca-certificates ffmpeg
    gstreamer1.0-plugins-base gstreamer1.0-plugins-good gstreamer1.0-plugins-bad
    gstreamer1.0-plugins-ugly gstreamer1.0-libav gstreamer1.0-tools)
PIP_PKGS=("torch==$TORCH" "pytest>=7.4,<9" "pytest-timeout>=2.1" "pytest-xdist>=3.0"
    "hypothesis>=6.80" "hatchling>=1.18")

log_tag=test-trixie
source "$repo/scripts/_log.sh"
source "$repo/scripts/_root.sh"

# --- building the root ------------------------------------------------------------------
build_venv() {
    mount_root
    [ -x "$R$VENV/bin/python" ] || in_root python3 -m venv --system-site-packages "$VENV"
    if ! in_root "$VENV/bin/python" -c 'import torch, pytest, pytest_timeout, xdist, hypothesis, hatchling' \
        2>/dev/null; then
        # Debian's numpy (and the rest of what Debian has) must stay: pin what is there
        in_root "$VENV/bin/python" - >"$R$VENV/debian-pins.txt" <<'EOF'
import importlib.metadata as md
for name in ("numpy", "psutil", "pillow", "packaging", "pyparsing", "python-dateutil",
             "matplotlib"):
    try:
        print(f"{name}=={md.version(name)}")
    except md.PackageNotFoundError:
        pass
EOF
        say "pip install ${PIP_PKGS[*]} into $VENV, with Debian's $(tr '\n' ' ' <"$R$VENV/debian-pins.txt")kept"
        retry in_root "$VENV/bin/python" -m pip install -q -c "$VENV/debian-pins.txt" "${PIP_PKGS[@]}"
    fi
}

build() {
    local t0=$SECONDS
    build_rootfs
    build_packages
    build_venv
    say "root ready in $((SECONDS - t0)) s: $R"
}

# --- testing in it ----------------------------------------------------------------------
versions() {  # what the root holds: Debian's Python, numpy and GStreamer OpenCV, or fail
    in_venv 300 python - <<'EOF'
import re, sys
import cv2, numpy, psutil, torch
gst = re.search(r"GStreamer:\s*(\S+)", cv2.getBuildInformation())
print(f"[test-trixie] Python {sys.version.split()[0]}, numpy {numpy.__version__} from "
      f"{numpy.__path__[0]}, OpenCV {cv2.__version__} (GStreamer {gst.group(1) if gst else '?'}), "
      f"psutil {psutil.__version__}, torch {torch.__version__}", file=sys.stderr)
assert torch.from_numpy(numpy.arange(3)).numpy().tolist() == [0, 1, 2]
sys.exit(sys.version_info[:2] != (3, 13) or not numpy.__path__[0].startswith("/usr/lib/python3/")
         or not gst or gst.group(1) != "YES")
EOF
}

run_tests() {
    local t0=$SECONDS
    mount_root
    copy_source
    versions || die "$R does not hold Debian trixie's Python 3.13, numpy and GStreamer OpenCV"
    timed "install over the system numpy" install_test
    say "pytest, the whole suite: Debian trixie's Python 3.13 / numpy 2.2 / OpenCV 4.10 / torch $TORCH"
    timed "pytest" in_venv 1800 python -m pytest -p no:cacheprovider -p no:benchmark \
        -n "${EDGELOAD_TEST_WORKERS:-2}" --dist loadfile --basetemp=/tmp/edgeload-pytest "$@"
    say "the suite on Debian trixie passed in $((SECONDS - t0)) s"
}

take_root EDGELOAD_SKIP_TRIXIE "Debian trixie's Python 3.13 stack" "$@"

case ${1:-} in
    # (never `build && ...`: bash ignores set -e inside a function run as part of && or ||)
    build) build ;;
    shell)
        build
        mount_root
        copy_source
        in_venv 86400 bash
        ;;
    *)
        build
        run_tests "$@"
        ;;
esac
