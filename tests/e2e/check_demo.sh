#!/usr/bin/env bash
# Runs scripts/demo against an existing build and checks what it wrote.
# Usage: check_demo.sh BIN_DIR OUT_DIR
set -euo pipefail
bin="$1"; out="$2"
here="$(cd "$(dirname "$0")" && pwd)"
if [ ! -x "$bin/mlprio-replay" ]; then
  echo "skipped: $bin/mlprio-replay is not built (build all targets first)"
  exit 77  # ctest: Skipped
fi
rm -rf "$out"
MLPRIO_BIN="$bin" MLPRIO_DEMO_NO_BUILD=1 "$here/../../scripts/demo" --no-slurm --jobs 1500 --seed 3 --out "$out"
/usr/bin/python3 "$here/check_demo.py" "$out"
