#!/usr/bin/env bash
# bench/scheduling_quality.sh — the scheduling-quality table of replay/README.md, from scratch:
# for each shared real trace, train the model on the first 80 % of jobs, tune the `ml` policy on
# windows of that training part only (mpirun -np N), then replay the held-out last 20 % from an
# empty cluster under FCFS, SJF, F1, UNICEP, Slurm's multifactor (requested times), EASY++
# (Tsafrir's last-two predictions, correction, SJBF) and the tuned `ml`, all with EASY backfilling
# and `--too-large skip`. Prints mean bounded slowdown (10 s floor), max and p99 wait.
# Beside the four traces the targets name, two the defaults were never tuned on: NASA iPSC/860
# (1993) and LCG-2005, whose grid pool (24,515 cores) never queues; its first 60,000 jobs are
# replayed on 1,000 cores (written to OUTDIR, not kept) so that the order matters; and the two
# generated Lublin-Feitelson traces (10,000 jobs, 256 nodes, no user ids), where the model has
# no history to learn from.
#   usage: bench/scheduling_quality.sh [OUTDIR] [NP] [TRACE...]   (needs ../shared/data/swf)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${B:-build/release/bin}
D=../shared/data/swf
OUT=${1:-out/scheduling_quality}
NP=${2:-2}
shift $(( $# > 2 ? 2 : $# ))
want=("$@")
[ -d "$D" ] || { echo "SKIP: $D not found"; exit 0; }
mkdir -p "$OUT"
MPI=(mpirun --oversubscribe -np "$NP")
[ "$(id -u)" = 0 ] && MPI+=(--allow-run-as-root)
command -v mpirun >/dev/null || MPI=()
fmt() {
  python3 -c '
import json, sys
for r in json.load(sys.stdin)["runs"]:
    print("| %s | %s | %.2f | %.2f | %.2f |" % (sys.argv[1], sys.argv[2] + r["policy"], r["avg_bsld"],
          r["max_wait"] / 86400, r["p99_wait"] / 86400))' "$@"
}
echo "| trace | policy | mean bsld | max wait (d) | p99 wait (d) |"
echo "|---|---|---|---|---|"
for spec in "mira 0" "theta 0" "hpc2n_subset 0" "metacentrum_wagap_2013 2176" \
            "NASA-iPSC-1993-3.1-cln 0" "LCG-2005 1000" "lublin_1 0" "lublin_2 0"; do
  set -- $spec
  t=$1
  if [ ${#want[@]} -gt 0 ] && [[ " ${want[*]} " != *" $t "* ]]; then continue; fi
  m=()
  [ "$2" != 0 ] && m=(--nodes "$2" --cores-per-node 1)  # no header / the grid pool cut down
  f=$D/$t.swf
  [ -f "$f" ] || f=$D/$t.swf.gz
  if [ "$t" = LCG-2005 ]; then
    f=$OUT/LCG-2005-60k.swf
    [ -f "$f" ] || { zcat $D/LCG-2005.swf.gz | awk '/^;/ {print; next} n++ < 60000' >"$f"; }
  fi
  n=$($B/mlprio-replay inspect --trace "$f" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"])')
  start=$(( n - n / 5 ))  # the held-out tail: jobs floor(0.8 n) .. n-1
  $B/mlprio-model train --trace "$f" --train-fraction 0.8 -o "$OUT/$t.json" >"$OUT/$t.train.log" 2>&1
  "${MPI[@]}" $B/mlprio-replay tune --trace "$f" "${m[@]}" --too-large skip --model "$OUT/$t.json" \
    --train-fraction 0.8 ${TUNE_ARGS:-} -o "$OUT/$t.tuned.json" --json >"$OUT/$t.tune.json" 2>"$OUT/$t.tune.log"
  run=($B/mlprio-replay run --trace "$f" "${m[@]}" --backfill easy --too-large skip
       --window "$start:$n" --no-series --json)
  "${run[@]}" --policy fcfs,sjf,f1,unicep,multifactor | fmt "$t" ""
  "${run[@]}" --policy fcfs,sjf --estimate last2 --correction tsafrir --backfill-order sjbf | fmt "$t" "EASY++ "
  "${run[@]}" --policy ml --estimate "model:$OUT/$t.tuned.json" | fmt "$t" "tuned "
done
