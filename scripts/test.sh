#!/usr/bin/env bash
# The whole check on a fresh clone: set-up plus dev extras, system packages for the
# real-media tests (when root), the test suite, ruff and mypy.  Extra arguments go
# to pytest (e.g. scripts/test.sh -k probe, or -m slow).
source "$(dirname "$0")/_setup.sh"
edgeload_install "dev"
source "$repo/scripts/_system_deps.sh"
system_deps

say "ruff"
"$venv/bin/ruff" check edgeload tests scripts benchmarks
"$venv/bin/ruff" format --check edgeload tests scripts benchmarks
say "mypy"
"$venv/bin/mypy"
say "pytest"
"$venv/bin/python" -m pytest "$@"
