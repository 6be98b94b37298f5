#!/usr/bin/env bash
# Cluster tests for site_factor/mlprio and job_submit/mlprio: each case starts a fresh cluster
# (cluster.sh), drives it with the real sbatch/sprio/scontrol, and fails with the slurmctld log
# tail when an expectation does not hold. Exit 77 = skipped (not root, Slurm or plugins missing).
#   cluster_test.sh BUILD_DIR CASE     CASE: load order timelimit refuse warn reconfig badmodel
#                                            async run
set -uo pipefail
MLPRIO_BUILD=$(cd "$1" && pwd) || exit 1
CASE=$2
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=cluster.sh
. "$HERE/cluster.sh"
cluster_skip_unless_possible
MODEL_TOOL="$MLPRIO_BUILD/bin/mlprio_slurm_testmodel"
[ -x "$MODEL_TOOL" ] || { echo "SKIP: $MODEL_TOOL not built"; exit $SKIP; }

M=$(mktemp -d /tmp/mlprio-models.XXXXXX)
chmod 755 "$M"
trap 'cluster_stop; rm -rf "$M"' EXIT
trap 'exit 1' INT TERM

failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
show_log() { echo "--- slurmctld.log (tail) ---"; tail -40 "$CL_DIR/slurmctld.log"; }
expect_log() {  # expect_log PATTERN [SECONDS]
  wait_for "${2:-5}" grep -q -- "$1" "$CL_DIR/slurmctld.log" || fail "log lacks: $1"
}
finish() {
  if [ "$failures" -gt 0 ]; then show_log; echo "$CASE: $failures failure(s)"; exit 1; fi
  echo "$CASE: PASS"
  exit 0
}
start() { cluster_start "$1" || { show_log 2>/dev/null; echo "cluster did not start"; exit 1; }; }
submit() { sbatch --parsable -o /dev/null "$@" --wrap 'sleep 1' 2>"$M/sbatch.err"; }

# Plain models: no history (run time = request), and root's history: 55 min runs.
"$MODEL_TOOL" "$M/plain.json" || exit 1
"$MODEL_TOOL" "$M/hist.json" --user root --last-run 3300 --fail-rate 0 || exit 1
"$MODEL_TOOL" "$M/failing.json" --user root --last-run 3300 --fail-rate 0.9 || exit 1
BASE="weight=10000,max_boost=100000,limit_margin=0.25"

case "$CASE" in
load)
  start "model=$M/plain.json,$BASE,bogus_key=1"
  expect_log "site_factor/mlprio: model loaded: formula model"
  expect_log "job_submit/mlprio: model loaded: formula model"
  expect_log "unknown parameter 'bogus_key' ignored"
  cluster_alive || fail "slurmctld not alive"
  ;;
order)
  start "model=$M/plain.json,$BASE"
  ids=()
  for t in 240 5 60 20; do ids+=("$(submit -p hold -t "$t")") || fail "sbatch -t $t"; done
  sleep 1
  sprio -l
  # Expected: shorter request -> shorter predicted run -> higher SITE (SJF score).
  prev=""
  for pair in "1:5" "3:20" "2:60" "0:240"; do
    id=${ids[${pair%%:*}]}
    s=$(site_of "$id")
    [ -n "$s" ] || { fail "no SITE for job $id"; continue; }
    [ "$s" -gt 0 ] || fail "SITE of job $id is $s, expected > 0"
    if [ -n "$prev" ] && [ "$s" -ge "$prev" ]; then fail "SITE not decreasing: job $id (-t ${pair#*:}) has $s >= $prev"; fi
    prev=$s
  done
  ;;
timelimit)
  start "model=$M/hist.json,$BASE"
  id=$(sbatch --parsable -p hold --wrap 'sleep 1' 2>"$M/err") || fail "sbatch failed: $(cat "$M/err")"
  cat "$M/err"
  grep -q "mlprio: time limit set to 01:09:00 (predicted run 00:55:00 + margin)" "$M/err" ||
    fail "sbatch did not print the time-limit message"
  scontrol show job "$id" | grep -q "TimeLimit=01:09:00" || fail "TimeLimit is not 01:09:00"
  id2=$(sbatch --parsable -p short --wrap 'sleep 1' 2>"$M/err") || fail "sbatch -p short failed"
  cat "$M/err"
  grep -q "clamped to the partition's MaxTime" "$M/err" || fail "no clamp message"
  scontrol show job "$id2" | grep -q "TimeLimit=00:30:00" || fail "TimeLimit not clamped to 00:30:00"
  id3=$(submit -p hold -t 10) || fail "sbatch -t 10"
  scontrol show job "$id3" | grep -q "TimeLimit=00:10:00" || fail "user's -t was changed"
  ;;
refuse)
  start "model=$M/failing.json,$BASE,refuse_above=0.5,refuse_mode=refuse"
  if sbatch -p hold --wrap 'sleep 1' 2>"$M/err"; then fail "job was not refused"; fi
  cat "$M/err"
  grep -q "predicted to fail with probability 0.90" "$M/err" || fail "refusal message missing"
  ;;
warn)
  start "model=$M/failing.json,$BASE,refuse_above=0.5,refuse_mode=warn"
  sbatch -p hold -t 5 --wrap 'sleep 1' 2>"$M/err" || fail "warned job was refused"
  cat "$M/err"
  grep -q "predicted to fail with probability 0.90" "$M/err" || fail "warning missing"
  ;;
reconfig)
  start "model=$M/plain.json,$BASE"
  id=$(submit -p hold -t 5)
  wait_for 30 sh -c "[ \"\$(sprio -h -j $id -o %S | tr -d ' ')\" -gt 0 ]" || fail "SITE was never set for job $id"
  s1=$(site_of "$id")
  cp "$M/plain.json" "$M/plain2.json"
  sed -i "s#^PrioritySiteFactorParameters=.*#PrioritySiteFactorParameters=model=$M/plain2.json,weight=20000,max_boost=100000#" "$SLURM_CONF"
  scontrol reconfigure || fail "scontrol reconfigure"
  expect_log "site_factor/mlprio: reconfigured (formula model" 30
  wait_for 30 sh -c "[ \"\$(sprio -h -j $id -o %S | tr -d ' ')\" -gt $((s1 + s1 / 2)) ]" ||
    fail "SITE did not follow the new weight (before $s1, now $(site_of "$id"))"
  # job_submit/mlprio picks the new parameters up at the next submission.
  submit -p hold -t 5 >/dev/null || fail "sbatch after reconfigure"
  expect_log "job_submit/mlprio: parameters changed; reconfigured" 20
  # A changed file on disk is picked up by the watcher (mtime), without reconfigure.
  "$MODEL_TOOL" "$M/plain2.json" --corrupt
  expect_log "refused: model file $M/plain2.json" 40
  wait_for 30 sh -c "[ \"\$(sprio -h -j $id -o %S | tr -d ' ')\" = 0 ]" ||
    fail "SITE not neutral after the model file was corrupted ($(site_of "$id"))"
  ;;
badmodel)
  "$MODEL_TOOL" "$M/corrupt.json" --corrupt
  "$MODEL_TOOL" "$M/schema.json" --wrong-schema
  "$MODEL_TOOL" "$M/gw.json" && chmod 664 "$M/gw.json"
  for bad in corrupt.json schema.json gw.json missing.json; do
    start "model=$M/$bad,$BASE"
    expect_log "site_factor/mlprio: .*$bad" 5
    grep "mlprio" "$CL_DIR/slurmctld.log" | grep "$bad" | head -2
    cluster_alive || fail "$bad: slurmctld died"
    id=$(sbatch --parsable -p hold -t 5 --wrap 'sleep 1' 2>"$M/err") || fail "$bad: sbatch failed: $(cat "$M/err")"
    sleep 1
    [ "$(site_of "$id")" = 0 ] || fail "$bad: SITE of $id is $(site_of "$id"), expected neutral 0"
    cluster_alive || fail "$bad: slurmctld died after submit"
    cluster_stop
  done
  ;;
async)
  # budget_us=0: every answer comes from the worker and is applied via set_job_prio().
  start "model=$M/plain.json,$BASE,budget_us=0"
  id=$(submit -p hold -t 5)
  wait_for 10 sh -c "[ \"\$(sprio -h -j $id -o %S | tr -d ' ')\" -gt 0 ]" ||
    fail "late answer never applied (SITE $(site_of "$id"))"
  ;;
run)
  start "model=$M/hist.json,$BASE"
  ids=()
  for _ in 1 2 3; do ids+=("$(sbatch --parsable -p debug -o "$CL_DIR/job-%j.out" --wrap 'sleep 1' 2>/dev/null)"); done
  for id in "${ids[@]}"; do
    wait_for 60 grep -q "JobId=$id .*JobState=COMPLETED" "$CL_DIR/jobcomp.log" ||
      fail "job $id did not complete: $(scontrol show job "$id" | grep -o 'JobState=[A-Z]*')"
  done
  grep -c "JobState=COMPLETED" "$CL_DIR/jobcomp.log"
  ;;
*)
  echo "unknown case $CASE"; exit 2 ;;
esac
finish
