#!/usr/bin/env bash
# The whole check on a fresh clone: set-up plus dev extras, system packages for the
# real-media tests (when root), the test suite, ruff and mypy.  Extra arguments go
# to pytest (e.g. scripts/test.sh -k probe, or -m slow).
source "$(dirname "$0")/_setup.sh"
edgeload_install "dev,plot"
source "$repo/scripts/_system_deps.sh"
system_deps

say "ruff"
"$venv/bin/ruff" check edgeload tests scripts benchmarks examples noxfile.py
"$venv/bin/ruff" format --check edgeload tests scripts benchmarks examples noxfile.py
say "Python 3.8 gate (JetPack 5): vermin and scripts/check_py38.py"
"$venv/bin/vermin" -q -t=3.8- --no-tips --violations edgeload tests scripts benchmarks examples
"$venv/bin/python" scripts/check_py38.py edgeload tests scripts benchmarks examples
say "mypy"
"$venv/bin/mypy"
say "pytest"
# Two test processes: much of the suite waits on real timeouts, worker start-up and
# cameras, so two cut the wall time by about a third even on a 2-core box
# (EDGELOAD_TEST_WORKERS=0 runs one). Files stay whole on one process, so module
# fixtures (clips, servers) are made once.
# pytest-benchmark turns itself off under xdist with a warning; the tests do not use it.
"$venv/bin/python" -m pytest -n "${EDGELOAD_TEST_WORKERS:-2}" --dist loadfile -p no:benchmark "$@"

# The GStreamer path (tests/video/test_gst.py) needs an OpenCV with GStreamer: Debian's
# python3-opencv, in the noxfile's bookworm session (which .ci/run runs whole, but for this).
"$venv/bin/nox" -s bookworm -- tests/video/test_gst.py
