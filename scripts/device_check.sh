#!/usr/bin/env bash
# Everything the GPU memory modes promise, on a real NVIDIA GPU, in one go (< 6 minutes):
#   1. find a Python whose torch sees CUDA (no network needed; pip only as a last try),
#   2. the whole test suite with EDGELOAD_REQUIRE_CUDA=1 (a skipped `cuda` test fails),
#   3. the fork tests on their own (a live probe must not initialise CUDA),
#   4. the race test: a long kernel keeps the GPU busy while both loaders deliver, and
#      every batch's checksum is computed on the GPU (tests/cuda/test_race_gpu.py),
#   5. the transfer benchmark: pageable + .cuda(), stock pin_memory, edgeload pinned +
#      async copy, mapped zero-copy, managed; 8 x 640x640x3 uint8 batches.
#   6. Jetson only (skipped elsewhere; NOT RUN YET - no Jetson has been available):
#      scripts/jetson_gst_check.py - H.264/H.265/MJPEG decoded on NVDEC and scaled by
#      the VIC through edgeload's pipelines, csi://0, and this board's gst-inspect
#      output saved beside the fixtures the pipeline text tests use.
# Results go to $OUT (if set) or ./device_check_out: env.txt, suite.txt, suite.xml,
# fork.txt, race.txt, transfer.json, transfer.txt, summary.txt. Exit status: 0 all good,
# 1 a step failed, 3 no usable CUDA torch on this machine.
#
#   scripts/device_check.sh --dry-run   print each step's command and run the CPU-side
#                                       half (the same lease tests on HostEngine) here.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
out="${OUT:-$repo/device_check_out}"
dry=0
[[ "${1:-}" == "--dry-run" ]] && dry=1
mkdir -p "$out"
say() { printf '\n== %s ==\n' "$*"; }
: >"$out/summary.txt"
status=0
# step NAME SECONDS LOGFILE COMMAND...: run (or, dry, print) one step under a time limit.
step() {
  local name=$1 limit=$2 log=$3
  shift 3
  say "$name (at most ${limit} s)"
  if ((dry)); then
    printf 'would run: timeout %s %s\n' "$limit" "$*"
    return 0
  fi
  local start=$SECONDS rc=0
  timeout "$limit" "$@" >"$out/$log" 2>&1 || rc=$?
  tail -25 "$out/$log"
  printf '%-10s rc=%-3s %4ss  %s\n' "$name" "$rc" "$((SECONDS - start))" "$log" | tee -a "$out/summary.txt"
  ((rc == 0)) || status=1
}

if ((dry)); then
  py="${PYTHON:-$repo/.venv/bin/python}"
  [[ -x "$py" ]] || py=python3
  export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
  say "dry run: the CPU half, for real ($py)"
  "$py" -m pytest -q -p no:cacheprovider tests/cuda/test_host_engine.py \
    tests/cuda/test_lease_on_engine.py tests/cuda/test_copy_counts.py
  "$py" -m pytest -q -p no:cacheprovider --collect-only tests/cuda/test_race_gpu.py >/dev/null
  echo "race test collects"
fi

say "machine"
{
  date -u
  uname -a
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || echo "no nvidia-smi"
} | tee "$out/env.txt"

# 1. A Python with CUDA torch: $PYTHON, then the project's venv, then the system's.
cuda_probe='import torch, sys; ok = torch.cuda.is_available(); print(torch.__version__, torch.version.cuda, ok); sys.exit(0 if ok else 1)'
py=""
for candidate in "${PYTHON:-}" "$repo/.venv/bin/python" python3 python; do
  [[ -n "$candidate" ]] && command -v "$candidate" >/dev/null 2>&1 || continue
  if answer=$(timeout 120 "$candidate" -c "$cuda_probe" 2>&1); then
    echo "using $candidate: torch $answer"
    py="$candidate"
    break
  fi
  echo "not $candidate: $(tail -1 <<<"$answer")"
done
# Installing anything is allowed only on a machine with an NVIDIA GPU (never on a dev
# box or CI, where a bare `pip install torch` pulls gigabytes), and only into a
# throwaway venv.
has_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; }
if [[ -z "$py" ]] && ((!dry)) && has_gpu && command -v python3 >/dev/null; then
  venv="${TMPDIR:-/tmp}/edgeload-device-venv"
  echo "no CUDA torch found; trying pip install torch into $venv (at most 150 s)"
  if timeout 150 bash -c "python3 -m venv '$venv' && '$venv/bin/pip' install --quiet torch numpy psutil pytest pytest-timeout hypothesis opencv-python-headless" >"$out/pip.txt" 2>&1 \
    && answer=$("$venv/bin/python" -c "$cuda_probe" 2>&1); then
    echo "using $venv/bin/python: torch $answer"
    py="$venv/bin/python"
  fi
fi
if [[ -z "$py" ]]; then
  if ((dry)); then
    py=PYTHON
    echo "dry run: no CUDA torch here; the GPU steps below are printed, not run"
  else
    echo "FAIL: no Python here has a torch that sees CUDA (see $out/env.txt); nothing checked" | tee -a "$out/env.txt"
    exit 3
  fi
fi

export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
if ((!dry)); then
  # numpy and psutil are edgeload's own dependencies; pytest and hypothesis run the checks.
  # Without a network none can be installed, so say what is missing instead of failing
  # obscurely.
  missing=$("$py" - <<'EOF'
import importlib.util
print(" ".join(m for m in ("numpy", "psutil", "pytest", "hypothesis", "cv2") if importlib.util.find_spec(m) is None))
EOF
)
  if [[ -n "$missing" ]]; then
    echo "missing modules: $missing" | tee -a "$out/env.txt"
    has_gpu && timeout 60 "$py" -m pip install --quiet numpy psutil pytest hypothesis opencv-python-headless >>"$out/pip.txt" 2>&1 || true
  fi
  if ! "$py" -c 'import edgeload.cuda.status as g; print("edgeload:", g.cuda_status().reason); print("auto memory mode:", g.auto_memory_mode())' 2>&1 | tee -a "$out/env.txt"; then
    echo "FAIL: edgeload does not import with $py (see above)"
    exit 1
  fi
fi

pytest=("$py" -m pytest -q -rfEs -p no:cacheprovider)
export EDGELOAD_REQUIRE_CUDA=1

# 2. The whole suite: CUDA tests must run (a skip fails), everything else as on CI.
step suite 180 suite.txt "${pytest[@]}" --junitxml="$out/suite.xml" tests
# 3. fork on a CUDA machine: the probe must leave CUDA uninitialised.
step fork 60 fork.txt "${pytest[@]}" -k fork tests/cuda tests/dataset tests/pipeline
# 4. The race: both loaders, every memory mode, a long kernel per batch, GPU checksums.
step race 60 race.txt "${pytest[@]}" tests/cuda/test_race_gpu.py tests/cuda/test_cuda.py
# 5. The benchmark (it also checks on the GPU that every batch arrived intact).
step transfer 45 transfer.txt "$py" benchmarks/bench_transfer.py --batches 40 --out "$out/transfer.json"
# 6. Jetson GStreamer pipelines (exit 3 from the script: not a Jetson, skipped).
if command -v gst-inspect-1.0 >/dev/null && gst-inspect-1.0 --exists nvv4l2decoder; then
  step jetson-gst 240 jetson_gst.txt "$py" scripts/jetson_gst_check.py
fi

say "done (status $status); results in $out"
cat "$out/summary.txt"
ls -l "$out"
exit "$status"
