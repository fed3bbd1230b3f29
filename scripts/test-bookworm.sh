#!/usr/bin/env bash
# Run the test suite on Debian's own Python stack - Raspberry Pi OS Bookworm's: Debian 12's
# Python 3.11, numpy 1.24, psutil and OpenCV 4.6 (python3-opencv, built with GStreamer) -
# in .venv-gst, a venv of /usr/bin/python3 that sees those packages (--system-site-packages)
# and adds only edgeload (editable, no dependencies), the CPU torch wheel and the test
# tools, pinned so that none of Debian's packages is replaced.
#
#   scripts/test-bookworm.sh                       the whole suite
#   scripts/test-bookworm.sh tests/video/test_gst.py   (what scripts/test.sh runs here)
#
# Needs Debian's python3-opencv with GStreamer (scripts/test.sh installs it when root);
# without it this says so and exits 0, unless EDGELOAD_REQUIRE_GSTREAMER=1 (set by .ci/run).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
py=/usr/bin/python3
venv=.venv-gst

log_tag=test-bookworm
source "$repo/scripts/_log.sh"

if ! "$py" -c 'import cv2, re, sys; sys.exit(not re.search(r"GStreamer:\s+YES", cv2.getBuildInformation()))' 2>/dev/null; then
    if [ "${EDGELOAD_REQUIRE_GSTREAMER:-0}" = 1 ]; then
        die "$py has no OpenCV with GStreamer (Debian's python3-opencv), and EDGELOAD_REQUIRE_GSTREAMER=1"
    fi
    say "$py has no OpenCV with GStreamer: the Debian-stack tests are skipped"
    exit 0
fi

[ -x "$venv/bin/python" ] || "$py" -m venv --system-site-packages "$venv"
vpy="$venv/bin/python"
if ! "$vpy" -c 'import pytest, pytest_timeout, xdist, hypothesis, matplotlib, torch' 2>/dev/null; then
    # Debian's numpy (and whatever else Debian has) must stay: pin what is there
    "$vpy" - >"$venv/debian-pins.txt" <<'EOF'
import importlib.metadata as md
for name in ("numpy", "psutil", "pillow", "packaging", "pyparsing", "python-dateutil"):
    try:
        print(f"{name}=={md.version(name)}")
    except md.PackageNotFoundError:
        pass
EOF
    say "installing into $venv: torch==2.13.0 (CPU) and the test tools, with Debian's $(tr '\n' ' ' <"$venv/debian-pins.txt")kept"
    "$vpy" -m pip install -q -c "$venv/debian-pins.txt" torch==2.13.0 "pytest>=7.4" \
        "pytest-timeout>=2.1" "pytest-xdist>=3.0" "hypothesis>=6.80" "matplotlib>=3.5"
fi
# from outside the tree, as the tests' subprocesses see it (here cwd would find it)
(cd / && "$repo/$vpy" -c 'import edgeload') 2>/dev/null || "$vpy" -m pip install -q --no-deps -e .

"$vpy" - <<'EOF'
import sys, numpy, cv2, torch
print("[test-bookworm] Python %s, numpy %s from %s, OpenCV %s (GStreamer), torch %s"
      % (sys.version.split()[0], numpy.__version__, numpy.__path__[0], cv2.__version__,
         torch.__version__), file=sys.stderr)
sys.exit(not numpy.__path__[0].startswith("/usr/lib/python3/"))  # Debian's numpy, not PyPI's
EOF
say "pytest: Debian's Python, numpy and GStreamer OpenCV (${*:-the whole suite})"
EDGELOAD_REQUIRE_GSTREAMER=1 "$vpy" -m pytest -p no:cacheprovider -p no:benchmark \
    -n "${EDGELOAD_TEST_WORKERS:-2}" --dist loadfile "$@"
