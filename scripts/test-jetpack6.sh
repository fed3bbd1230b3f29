#!/usr/bin/env bash
# Run the test suite on JetPack 6's Python stack, on this x86 machine: Python 3.10, numpy
# 1.21.5 and psutil 5.9.0 (Ubuntu 22.04's, as JetPack 6 has them), PyPI's headless OpenCV
# 4.9.0 (FFmpeg, no GStreamer) and PyPI's build of torch 2.6.0 (JetPack 6.2's), the whole
# suite. OpenCV is 4.9, not JetPack 6's 4.8.0, because PyPI's 4.8.0.76 and 4.8.1.78 do not
# import with numpy 1.21 (their cv2.typing subscripts numpy.dtype, which numpy 1.22 added). PyPI's x86_64 Linux torch is a CUDA build (with its
# nvidia-* wheels, about 2.5 GB; this venv only), as JetPack's is; here it runs on the CPU.
# scripts/test-jetpack5.sh covers JetPack 5's Python 3.8 and the oldest numpy and torch.
#
#   scripts/test-jetpack6.sh [pytest args]     (the args go to the whole-suite run)
#
# The venv is cached outside the clone, in $EDGELOAD_JETPACK6_CACHE (default
# /var/cache/edgeload-jetpack6): minutes to build, seconds when cached.  Python 3.10 is
# $EDGELOAD_PY310, else python3.10 on PATH, else pyenv's.
# EDGELOAD_SKIP_JETPACK6=1 skips it all, loudly (not for CI).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
CACHE=${EDGELOAD_JETPACK6_CACHE:-/var/cache/edgeload-jetpack6}
TORCH=2.6.0
# JetPack 6's own versions, but for OpenCV (the oldest that imports with numpy 1.21); torch
# is added
STACK=("numpy==1.21.5" "psutil==5.9.0" "opencv-python-headless==4.9.0.80" "typing-extensions"
    "tomli>=1.1")
# numpy 1.21 holds matplotlib at 3.8, which calls pyparsing's camelCase names: pyparsing 3.3
# deprecates them (a warning, so an error in the suite)
TOOLS=("pytest>=7.4,<9" "pytest-timeout>=2.1" "pytest-xdist>=3.0" "hypothesis>=6.80"
    "matplotlib>=3.5" "pyparsing<3.3")

log_tag=test-jetpack6
source "$repo/scripts/_log.sh"
source "$repo/scripts/_pystack.sh"
stack_name="JetPack 6"

if [ "${EDGELOAD_SKIP_JETPACK6:-0}" = 1 ]; then
    say "SKIPPED: EDGELOAD_SKIP_JETPACK6=1; nothing ran on Python 3.10 / numpy 1.21 / torch $TORCH"
    exit 0
fi

py=$(find_python 3.10 "${EDGELOAD_PY310:-}") || die "no Python 3.10 found (set EDGELOAD_PY310, \
put python3.10 on PATH, or install one with pyenv); EDGELOAD_SKIP_JETPACK6=1 skips this part"

# What the venv must hold, checked on every run (a stale cache fails here, not in a test),
# and that torch works with this numpy: an ABI mismatch is only a warning at import
CHECK='
import sys, warnings
warnings.simplefilter("error")
import numpy, cv2, torch, psutil
have = (sys.version_info[:2], numpy.__version__, cv2.__version__, torch.__version__.split("+")[0])
print("[test-jetpack6] Python %d.%d, numpy %s, OpenCV %s, torch %s," % (have[0] + have[1:]),
      "psutil", psutil.__version__, file=sys.stderr)
assert torch.from_numpy(numpy.arange(3)).numpy().tolist() == [0, 1, 2]
sys.exit(have != ((3, 10), "1.21.5", "4.9.0", sys.argv[1]) or psutil.__version__ != "5.9.0")
'

venv=$(venv_for "$TORCH")
say "pytest, the whole suite: Python 3.10 / numpy 1.21.5 / OpenCV 4.9.0 / torch $TORCH"
run_pytest "$venv" "$@"
