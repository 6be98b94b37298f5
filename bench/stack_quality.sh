#!/usr/bin/env bash
# bench/stack_quality.sh — the deployed-stack scheduling table: for each shared real trace, train
# the model on the first 80 % of jobs, `tune --slurm-conf` the deployable configuration on that
# training part only (mpirun -np N), then replay the held-out last 20 % from an empty cluster
# with the deployed-stack replay under
#   stock    the site's stock slurm.conf: priority/multifactor with the example weights of Slurm's
#            priority/multifactor documentation (PriorityDecayHalfLife=14-0, PriorityMaxAge=14-0,
#            PriorityWeightAge=1000, PriorityWeightFairshare=10000, PriorityWeightJobSize=1000,
#            PriorityWeightPartition=1000, PriorityWeightQOS=0), slurmdbd, sched/backfill defaults;
#   +SITE    the same with site_factor/mlprio and the untuned model (weight 10000);
#   tuned    the slurm.conf tune wrote (tuned.conf, naming tuned.json);
# and, for reference, SJF, F1 and EASY++ (FCFS with Tsafrir's last-two estimates, correction and
# SJBF) with EASY backfilling, which no slurm.conf deploys. Prints mean bounded slowdown (10 s
# floor), mean, max and p99 wait and utilisation, and tuned / stock.
#   usage: bench/stack_quality.sh [OUTDIR] [NP] [TRACE...]   (needs ../shared/data/swf)
# DEV_CUT=P: a development split instead: the trace cut to its first P of jobs (P <= 0.8 keeps
# it inside the training part of the held-out table), tuned on the cut's first 80 %, replayed on
# its last 20 %; how defaults are chosen without looking at the held-out tails.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${B:-build/release/bin}
D=../shared/data/swf
OUT=${1:-out/stack_quality}
NP=${2:-2}
shift $(( $# > 2 ? 2 : $# ))
want=("$@")
[ -d "$D" ] || { echo "SKIP: $D not found"; exit 0; }
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
MPI=(mpirun --oversubscribe -np "$NP")
[ "$(id -u)" = 0 ] && MPI+=(--allow-run-as-root)
command -v mpirun >/dev/null || MPI=()
cat >"$OUT/stock.conf" <<'CONF'
AccountingStorageType=accounting_storage/slurmdbd
PriorityType=priority/multifactor
PriorityDecayHalfLife=14-0
PriorityMaxAge=14-0
PriorityWeightAge=1000
PriorityWeightFairshare=10000
PriorityWeightJobSize=1000
PriorityWeightPartition=1000
PriorityWeightQOS=0
SchedulerType=sched/backfill
CONF
fmt() {  # fmt TRACE LABEL [STOCK_JSON] < run --json
  python3 -c '
import json, sys
stock = None
if len(sys.argv) > 3:
    stock = json.load(open(sys.argv[3]))["runs"][0]
for r in json.load(sys.stdin)["runs"]:
    ratio = "%.2f" % (r["avg_bsld"] / stock["avg_bsld"]) if stock else ""
    mw = "%.2f" % (r["max_wait"] / max(stock["max_wait"], 1)) if stock else ""
    label = sys.argv[2] + (r["policy"] if sys.argv[2].endswith(" ") else "")
    print("| %s | %s | %.2f | %.0f | %.2f | %.2f | %.3f | %s | %s |" % (sys.argv[1], label,
          r["avg_bsld"], r["avg_wait"], r["max_wait"] / 86400, r["p99_wait"] / 86400,
          r["utilization"], ratio, mw))' "$@"
}
echo "| trace | configuration | mean bsld | mean wait (s) | max wait (d) | p99 wait (d) | utilisation | bsld / stock | max wait / stock |"
echo "|---|---|---|---|---|---|---|---|---|"
for spec in "mira 0" "theta 0" "hpc2n_subset 0" "metacentrum_wagap_2013 2176"; do
  set -- $spec
  t=$1
  if [ ${#want[@]} -gt 0 ] && [[ " ${want[*]} " != *" $t "* ]]; then continue; fi
  m=()
  [ "$2" != 0 ] && m=(--nodes "$2" --cores-per-node 1)  # no machine in the header
  f=$D/$t.swf
  tag=$t
  if [ -n "${DEV_CUT:-}" ]; then
    tag=$t-dev$DEV_CUT
    f=$OUT/$tag.swf
    # Comment lines first, then the first DEV_CUT of the jobs in submit order (stable for ties).
    [ -s "$f" ] || python3 bench/cut_trace.py "$D/$t.swf" "$DEV_CUT" "$f"
  fi
  n=$($B/mlprio-replay inspect --trace "$f" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"])')
  start=$(( n - n / 5 ))  # the held-out tail: jobs floor(0.8 n) .. n-1
  [ -s "$OUT/$tag.json" ] ||
    $B/mlprio-model train --trace "$f" --train-fraction 0.8 -o "$OUT/$tag.json" >"$OUT/$tag.train.log" 2>&1
  printf 'Include %s\nPrioritySiteFactorPlugin=site_factor/mlprio\nPrioritySiteFactorParameters=model=%s,weight=10000\n' \
    "$OUT/stock.conf" "$OUT/$tag.json" >"$OUT/$tag.site.conf"
  "${MPI[@]}" $B/mlprio-replay tune --trace "$f" "${m[@]}" --too-large skip --model "$OUT/$tag.json" \
    --train-fraction 0.8 --slurm-conf "$OUT/stock.conf" --slurm-conf-out "$OUT/$tag.tuned.conf" \
    ${TUNE_ARGS:-} -o "$OUT/$tag.tuned.json" --json >"$OUT/$tag.tune.json" 2>"$OUT/$tag.tune.log"
  run=($B/mlprio-replay run --trace "$f" "${m[@]}" --too-large skip --window "$start:$n"
       --no-series --json)
  "${run[@]}" --slurm-conf "$OUT/stock.conf" 2>/dev/null >"$OUT/$tag.stock.run.json"
  fmt "$tag" "stock (deployed)" <"$OUT/$tag.stock.run.json"
  "${run[@]}" --slurm-conf "$OUT/$tag.site.conf" 2>/dev/null | fmt "$tag" "+SITE, untuned (deployed)" "$OUT/$tag.stock.run.json"
  "${run[@]}" --slurm-conf "$OUT/$tag.tuned.conf" 2>/dev/null | fmt "$tag" "tuned (deployed)" "$OUT/$tag.stock.run.json"
  "${run[@]}" --backfill easy --policy sjf,f1 | fmt "$tag" "EASY " "$OUT/$tag.stock.run.json"
  "${run[@]}" --backfill easy --policy fcfs --estimate last2 --correction tsafrir --backfill-order sjbf |
    fmt "$tag" "EASY++ " "$OUT/$tag.stock.run.json"
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print("|", sys.argv[2], "| chosen:", j["chosen"], "| train median", round(j["train_bsld_ratio"], 3), "IQR", round(j["train_bsld_ratio_p25"], 3), "..", round(j["train_bsld_ratio_p75"], 3), "| max wait", j["max_wait_stat"], round(j["train_max_wait_ratio"], 3), "| | | | | |")' "$OUT/$tag.tune.json" "$tag"
done
