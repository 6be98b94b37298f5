#!/usr/bin/env bash
# The ground-truth measurement on one GPU, in one call: the smoke matrix (a two-layer GPT-2, a
# few seconds: proves the path before the GPU time goes on the big models), then matrix_gpu.json
# (GPT-2 XL and T5-3B; cudaMalloc and expandable segments; one real rank and rank 0 of an
# emulated 8) under a wall-time budget that the harness shares out configuration by
# configuration (each configuration's process is killed at the end of its share, and a hung
# point after its point_timeout_s, keeping the points already measured). Everything goes to OUT.
#
#   fsdp_profiler/validate/run_gpu.sh [OUT] [BUDGET_S]    # defaults: $OUT or truth.out, 510
#
# Needs python3 with torch (CUDA), transformers, h5py and numpy; exit 77 when they or the GPU
# are missing (nothing measured). The comparison needs no GPU: afterwards, on any machine,
#   fsdp_profiler/validate/truth_compare.py OUT/truth --fsdp build/release/bin/mlprio-fsdp --out OUT/cmp
# When BUILD_DIR/bin/mlprio-fsdp exists here (BUILD_DIR defaults to build/release), this script
# runs that comparison too.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-${OUT:-truth.out}}
budget=${2:-510}
py=${PYTHON:-python3}
mkdir -p "$out"
{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  "$py" -c 'import torch, transformers, h5py; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__, "h5py", h5py.__version__)'
} 2>&1 | tee "$out/environment.txt"

# The smoke matrix first: two minutes at most.
timeout --kill-after=10 150 "$py" "$here/truth_harness.py" run "$here/matrix_smoke.json" \
  --out "$out/smoke" --time-budget-s 120 2>&1 | tee "$out/smoke.log"
rc=${PIPESTATUS[0]}
if [[ $rc == 77 ]]; then
  echo "run_gpu.sh: skipped: no torch/transformers/CUDA here"
  exit 77
fi
[[ $rc == 0 ]] || echo "run_gpu.sh: the smoke matrix ended with $rc; going on with the real one"

timeout --kill-after=10 $((budget + 60)) "$py" "$here/truth_harness.py" run \
  "$here/matrix_gpu.json" --out "$out/truth" --time-budget-s "$budget" 2>&1 | tee "$out/truth.log"
rc=${PIPESTATUS[0]}

fsdp=${BUILD_DIR:-build/release}/bin/mlprio-fsdp
if [[ -x $fsdp ]]; then
  "$py" "$here/truth_compare.py" "$out/truth" --fsdp "$fsdp" --out "$out/cmp" 2>&1 |
    tee "$out/compare.log"
fi
ls -la "$out" "$out/truth" 2>/dev/null | tee "$out/files.txt" > /dev/null
echo "run_gpu.sh: harness exit $rc; results in $out"
exit "$rc"
