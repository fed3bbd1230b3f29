#!/usr/bin/env bash
# Run the test suite on JetPack 5's Python stack, on this x86 machine: Python 3.8, numpy
# 1.17.4 and psutil 5.5.1 (Ubuntu 20.04's, as JetPack 5 has them), OpenCV 4.5.4 (JetPack 5's
# version; PyPI's headless build: FFmpeg, no GStreamer) and PyPI's builds of the torch
# releases JetPack 5 shipped, which run on the CPU:
#   - torch 1.11.0 (JetPack 5.0, edgeload's floor): the whole suite;
#   - torch 1.12.1 (JetPack 5.0.2): the DataLoader and GPU-memory tests, where the two differ.
# scripts/test-targets.sh covers the arm64 side under emulation, with Debian bullseye's
# Python 3.9; this covers Python 3.8 and the oldest numpy and torch, natively and fast
# enough for the whole suite.
#
#   scripts/test-jetpack5.sh [pytest args]     (the args go to the whole-suite run)
#
# The venvs are cached outside the clone, in $EDGELOAD_JETPACK5_CACHE (default
# /var/cache/edgeload-jetpack5): about a minute each to build (a 750-780 MB torch wheel),
# seconds when cached.  Python 3.8 is $EDGELOAD_PY38, else python3.8 on PATH, else pyenv's.
# EDGELOAD_SKIP_JETPACK5=1 skips it all, loudly (not for CI).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
CACHE=${EDGELOAD_JETPACK5_CACHE:-/var/cache/edgeload-jetpack5}
# JetPack 5's own versions where PyPI has them for Python 3.8 on x86_64; torch is added
STACK=("numpy==1.17.4" "psutil==5.5.1" "opencv-python-headless==4.5.4.60" "typing-extensions"
    "tomli>=1.1")
TOOLS=("pytest>=7.4,<9" "pytest-timeout>=2.1" "pytest-xdist>=3.0" "hypothesis>=6.80"
    "matplotlib>=3.5")

log_tag=test-jetpack5
source "$repo/scripts/_log.sh"
source "$repo/scripts/_pystack.sh"
stack_name="JetPack 5"

if [ "${EDGELOAD_SKIP_JETPACK5:-0}" = 1 ]; then
    say "SKIPPED: EDGELOAD_SKIP_JETPACK5=1; nothing ran on Python 3.8 / torch 1.11-1.12"
    exit 0
fi

py=$(find_python 3.8 "${EDGELOAD_PY38:-}") || die "no Python 3.8 found (set EDGELOAD_PY38, put \
python3.8 on PATH, or install one with pyenv); EDGELOAD_SKIP_JETPACK5=1 skips this part"

# What each venv must hold, checked on every run (a stale cache fails here, not in a test)
CHECK='
import sys, numpy, cv2, torch, psutil
have = (sys.version_info[:2], numpy.__version__, cv2.__version__, torch.__version__.split("+")[0])
print("[test-jetpack5] Python %d.%d, numpy %s, OpenCV %s, torch %s," % (have[0] + have[1:]),
      "psutil", psutil.__version__, file=sys.stderr)
sys.exit(have != ((3, 8), "1.17.4", "4.5.4", sys.argv[1]))
'

floor=$(venv_for 1.11.0)
say "pytest, the whole suite: Python 3.8 / numpy 1.17.4 / OpenCV 4.5.4 / torch 1.11.0"
run_pytest "$floor" "$@"
later=$(venv_for 1.12.1)
say "pytest, the DataLoader and GPU-memory tests: the same stack with torch 1.12.1"
run_pytest "$later" -q tests/dataset tests/cuda
