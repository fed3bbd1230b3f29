# Shared set-up for scripts/demo.sh and scripts/test.sh; sourced, not run.
# Makes .venv (with system site packages, so a Jetson's JetPack torch and GStreamer
# OpenCV are used when present), installs what is missing, and is quick when
# nothing changed.  EDGELOAD_PYTHON picks the interpreter (default: python3).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
venv="$repo/.venv"
py="${EDGELOAD_PYTHON:-python3}"

say() { printf '[edgeload] %s\n' "$*" >&2; }

if [ ! -x "$venv/bin/python" ]; then
    say "creating .venv with $($py --version 2>&1) (system site packages visible)"
    "$py" -m venv --system-site-packages "$venv"
fi
vpy="$venv/bin/python"

# extras: "" for the demo, "dev,plot" for the tests (the --plot test needs matplotlib)
edgeload_install() {
    local extras="$1" stamp want
    stamp="$venv/.edgeload-stamp"
    want="$(cat pyproject.toml | sha1sum | cut -c1-12)-$extras"
    if [ -f "$stamp" ] && grep -qx -- "$want" "$stamp" && "$vpy" -c 'import edgeload' 2>/dev/null; then
        return 0
    fi
    # torch: a bare requirement makes pip fetch a multi-GB CUDA build; take the
    # CPU wheel this kind of machine carries unless a torch (JetPack's) is already there.
    if ! "$vpy" -c 'import torch' 2>/dev/null; then
        say "installing torch==2.13.0 (CPU)"
        "$vpy" -m pip install -q torch==2.13.0
    fi
    if ! "$vpy" -c 'import cv2' 2>/dev/null; then
        say "installing opencv-python-headless"
        "$vpy" -m pip install -q opencv-python-headless
    fi
    local target="."
    [ -n "$extras" ] && target=".[$extras]"
    say "installing edgeload ($target)"
    "$vpy" -m pip install -q -e "$target"
    echo "$want" > "$stamp"
}
