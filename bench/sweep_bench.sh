#!/usr/bin/env bash
# bench/sweep_bench.sh — the speed-up of `mlprio-replay sweep` on 2 MPI ranks over 1 (the figure
# in replay/README.md, "Sweeps"): the same sweep (default 4 policies x easy/conservative x 15
# windows of 40,000 jobs of LCG-2005 = 120 tasks) run alone (MPI singleton) and under
# `mpiexec -n 2`, each into a fresh output; prints the sweep's own driver seconds (without trace
# loading), the wall time, the speed-ups, and whether both --json outputs are byte-identical
# (md5). Exit 1 when they differ. Run it on an otherwise idle machine (uptime load < 2.5 on the
# 2-core box), as README's figures were.
# Usage: bench/sweep_bench.sh BIN_DIR [TRACE] [COUNTxLEN] [POLICIES] [NP]
set -euo pipefail
bin="${1:?usage: sweep_bench.sh BIN_DIR [TRACE] [COUNTxLEN] [POLICIES] [NP]}"
here="$(cd "$(dirname "$0")" && pwd)"
trace="${2:-$here/../../shared/data/swf/LCG-2005.swf.gz}"
windows="${3:-15x40000}"
policies="${4:-fcfs,sjf,multifactor,wfp3}"
np="${5:-2}"
work="$(mktemp -d /tmp/mlprio-sweep-bench.XXXXXX)"
trap 'rm -rf "$work"' EXIT
mpi=(mpiexec --oversubscribe -n "$np")
[ "$(id -u)" = 0 ] && mpi+=(--allow-run-as-root)
args=(sweep --trace "$trace" --policy "$policies" --backfill easy,conservative
      --windows "$windows" --seed 1 --json --no-progress)

# run LABEL [LAUNCHER...]: prints "driver_s wall_s" and leaves LABEL.json in $work.
run() {
  local label="$1"; shift
  local t0 t1
  t0=$(date +%s.%N)
  "$@" "$bin/mlprio-replay" "${args[@]}" --out "$work/$label.h5" > "$work/$label.json" 2> "$work/$label.err" \
    || { cat "$work/$label.err" >&2; exit 1; }
  t1=$(date +%s.%N)
  local driver
  driver=$(sed -n 's/.* failed, \([0-9.e+-]*\) s -> .*/\1/p' "$work/$label.err" | tail -1)
  echo "$driver $(echo "$t1 - $t0" | bc -l)"
}

read -r d1 w1 < <(run n1)
read -r d2 w2 < <(run n$np "${mpi[@]}")
tasks=$(sed -n 's/^mlprio-replay sweep: \([0-9]*\) tasks.*/\1/p' "$work/n1.err" | tail -1)
m1=$(md5sum < "$work/n1.json" | cut -d' ' -f1)
m2=$(md5sum < "$work/n$np.json" | cut -d' ' -f1)
printf 'sweep_bench: %s tasks (%s, %s, easy+conservative, windows %s)\n' "$tasks" "$(basename "$trace")" "$policies" "$windows"
printf '  N = 1:  driver %.2f s, wall %.2f s\n' "$d1" "$w1"
printf '  N = %s:  driver %.2f s, wall %.2f s\n' "$np" "$d2" "$w2"
printf '  speed-up: %.2fx driver, %.2fx wall; --json identical: %s\n' \
  "$(echo "$d1 / $d2" | bc -l)" "$(echo "$w1 / $w2" | bc -l)" "$([ "$m1" = "$m2" ] && echo yes || echo NO)"
[ "$m1" = "$m2" ]
