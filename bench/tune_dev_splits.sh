#!/usr/bin/env bash
# bench/tune_dev_splits.sh — compares tune variants on *development* splits, inside the part of
# each trace that scheduling_quality.sh trains on, so that a default can be chosen without
# looking at the held-out tails. For each cut P (default 0.6 0.7 0.8) the trace's jobs are sorted
# by submit time and cut to the first P; on that prefix the model is trained and the policy tuned
# on its first 80 %, and the prefix's last 20 % (jobs [0.8 P, P) of the trace) is replayed under
# FCFS+EASY and tuned `ml`. Each variant is one set of extra tune arguments.
#   usage: bench/tune_dev_splits.sh OUTDIR NP "VARIANT ARGS" ["VARIANT ARGS" ...]
#   e.g.:  bench/tune_dev_splits.sh out/dev 2 "--request-weights 0" "--request-weights 0,0.5,1"
# CUTS="0.6 0.7" and TRACES="mira theta" narrow it. Prints one row per trace, cut and variant:
# mean bounded slowdown and max wait (days) of FCFS and of tuned ml, and their ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${B:-build/release/bin}
D=../shared/data/swf
OUT=${1:?usage: bench/tune_dev_splits.sh OUTDIR NP VARIANT...}
NP=${2:?usage: bench/tune_dev_splits.sh OUTDIR NP VARIANT...}
shift 2
[ $# -gt 0 ] || { echo "bench/tune_dev_splits.sh: give at least one variant" >&2; exit 2; }
[ -d "$D" ] || { echo "SKIP: $D not found"; exit 0; }
mkdir -p "$OUT"
MPI=(mpirun --oversubscribe -np "$NP")
[ "$(id -u)" = 0 ] && MPI+=(--allow-run-as-root)
command -v mpirun >/dev/null || MPI=()
row() {  # row TRACE CUT VARIANT FCFS_JSON ML_JSON (run --json outputs)
  python3 -c '
import json, sys
f = json.load(open(sys.argv[4]))["runs"][0]
m = json.load(open(sys.argv[5]))["runs"][0]
print("| %s | %s | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |" % (sys.argv[1], sys.argv[2],
      sys.argv[3], f["avg_bsld"], m["avg_bsld"], m["avg_bsld"] / f["avg_bsld"],
      f["max_wait"] / 86400, m["max_wait"] / 86400, m["max_wait"] / max(f["max_wait"], 1)))' "$@"
}
echo "| trace | cut | tune variant | FCFS bsld | ml bsld | ratio | FCFS max wait (d) | ml max wait (d) | ratio |"
echo "|---|---|---|---|---|---|---|---|---|"
for spec in ${TRACES:-mira theta hpc2n_subset metacentrum_wagap_2013}; do
  t=$spec
  m=()
  [ "$t" = metacentrum_wagap_2013 ] && m=(--nodes 2176 --cores-per-node 1)
  for cut in ${CUTS:-0.6 0.7 0.8}; do
    f=$OUT/$t-$cut.swf
    # Comment lines first, then the first `cut` of the jobs in submit order (stable for ties).
    [ -s "$f" ] || python3 bench/cut_trace.py "$D/$t.swf" "$cut" "$f"
    n=$("$B"/mlprio-replay inspect --trace "$f" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"])')
    start=$(( n - n / 5 ))
    [ -s "$OUT/$t-$cut.model.json" ] ||
      "$B"/mlprio-model train --trace "$f" --train-fraction 0.8 -o "$OUT/$t-$cut.model.json" >/dev/null 2>&1
    run=("$B"/mlprio-replay run --trace "$f" "${m[@]}" --backfill easy --too-large skip
         --window "$start:$n" --no-series --json)
    "${run[@]}" --policy fcfs >"$OUT/$t-$cut.fcfs.json"
    k=0
    for variant in "$@"; do
      k=$((k + 1))
      # shellcheck disable=SC2086 # the variant is a list of arguments
      "${MPI[@]}" "$B"/mlprio-replay tune --trace "$f" "${m[@]}" --too-large skip \
        --model "$OUT/$t-$cut.model.json" --train-fraction 0.8 $variant \
        -o "$OUT/$t-$cut.tuned$k.json" --json >/dev/null 2>"$OUT/$t-$cut.tune$k.log"
      "${run[@]}" --policy ml --estimate "model:$OUT/$t-$cut.tuned$k.json" >"$OUT/$t-$cut.ml$k.json"
      row "$t" "$cut" "$variant" "$OUT/$t-$cut.fcfs.json" "$OUT/$t-$cut.ml$k.json"
    done
  done
done
