#!/usr/bin/env bash
# The main job on a fresh clone: set up .venv, then run `edgeload demo`
# (arguments pass through, e.g. scripts/demo.sh rtsp://cam/stream).
source "$(dirname "$0")/_setup.sh"
edgeload_install ""
exec "$venv/bin/edgeload" demo "$@"
