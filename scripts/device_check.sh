#!/usr/bin/env bash
# GPU memory modes on a real NVIDIA GPU, in one go (< 4 minutes on a bare box):
#   1. find a Python whose torch sees CUDA (no network needed; pip only as a last try),
#   2. run the `cuda` tests with EDGELOAD_REQUIRE_CUDA=1 (a skip is a failure here),
#   3. run the transfer benchmark: pageable + .cuda(), stock pin_memory, edgeload
#      pinned + async copy, mapped zero-copy, managed; 8 x 640x640x3 uint8 batches.
# Results go to $OUT (if set) or ./device_check_out: env.txt, pytest.txt, junit.xml,
# transfer.json, transfer.txt. Exit status: 0 all good, 1 tests or benchmark failed,
# 3 no usable CUDA torch on this machine.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
out="${OUT:-$repo/device_check_out}"
mkdir -p "$out"
say() { printf '\n== %s ==\n' "$*"; }

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
if [[ -z "$py" ]] && has_gpu && command -v python3 >/dev/null; then
  venv="${TMPDIR:-/tmp}/edgeload-device-venv"
  echo "no CUDA torch found; trying pip install torch into $venv (at most 150 s)"
  if timeout 150 bash -c "python3 -m venv '$venv' && '$venv/bin/pip' install --quiet torch numpy psutil pytest pytest-timeout" >"$out/pip.txt" 2>&1 \
    && answer=$("$venv/bin/python" -c "$cuda_probe" 2>&1); then
    echo "using $venv/bin/python: torch $answer"
    py="$venv/bin/python"
  fi
fi
if [[ -z "$py" ]]; then
  echo "FAIL: no Python here has a torch that sees CUDA (see $out/env.txt); nothing checked" | tee -a "$out/env.txt"
  exit 3
fi

# numpy and psutil are edgeload's own dependencies; pytest runs the checks. Without a
# network none can be installed, so say what is missing instead of failing obscurely.
missing=$("$py" - <<'EOF'
import importlib.util
print(" ".join(m for m in ("numpy", "psutil", "pytest", "pytest_timeout", "cv2") if importlib.util.find_spec(m) is None))
EOF
)
if [[ -n "$missing" ]]; then
  echo "missing modules: $missing" | tee -a "$out/env.txt"
  if has_gpu; then
    echo "trying pip for them (may fail offline)"
    timeout 60 "$py" -m pip install --quiet numpy psutil pytest pytest-timeout >>"$out/pip.txt" 2>&1 || true
  fi
fi
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
if ! "$py" -c 'import edgeload.cuda.status as g; print("edgeload:", g.cuda_status().reason); print("auto memory mode:", g.auto_memory_mode())' 2>&1 | tee -a "$out/env.txt"; then
  echo "FAIL: edgeload does not import with $py (see above)"
  exit 1
fi

status=0

# 2. The cuda-marked tests, where a skip would hide a broken GPU path, then the
#    CPU-side mode tests for good measure.
say "cuda tests"
pytest_args=(-q -rfEs -p no:cacheprovider --junitxml="$out/junit.xml")
"$py" -c 'import pytest_timeout' 2>/dev/null || pytest_args+=(-W "ignore::pytest.PytestConfigWarning")
# conftest.py needs psutil (leak checks); without it run the tests bare rather than not at all.
"$py" -c 'import psutil' 2>/dev/null || { echo "psutil missing: running without conftest.py"; pytest_args+=(--noconftest); }
tests=(tests/cuda/test_cuda.py tests/cuda/test_memory_modes.py)
[[ -f tests/pipeline/test_slots.py && ! " ${pytest_args[*]} " =~ " --noconftest " ]] && tests+=(tests/pipeline/test_slots.py)
if "$py" -c 'import pytest' 2>/dev/null; then
  EDGELOAD_REQUIRE_CUDA=1 timeout 150 "$py" -m pytest "${pytest_args[@]}" "${tests[@]}" 2>&1 | tee "$out/pytest.txt" || status=1
else
  echo "FAIL: pytest is not installed and could not be installed" | tee "$out/pytest.txt"
  status=1
fi

# 3. The benchmark (it checks on the GPU that every batch arrived intact).
say "transfer benchmark"
timeout 90 "$py" benchmarks/bench_transfer.py --batches 40 --out "$out/transfer.json" 2>&1 | tee "$out/transfer.txt" || status=1

say "done (status $status); results in $out"
ls -l "$out"
exit "$status"
