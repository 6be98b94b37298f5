#!/usr/bin/env bash
# One workload two ways: for real on the loopback cluster (cluster.sh: Debian's slurmctld, a
# node declaring CL_NODE_CPUS CPUs, jobs that sleep their run time, submitted at their offsets),
# and in the deployed-stack replay (`mlprio-replay run --slurm-conf`) of the cluster's own
# slurm.conf with the jobs as slurmctld recorded them (its submit times, run times, sizes and
# limits). Prints and writes OUT/agreement.json: per-job start differences, the rank correlation
# of the start order, each side's mean wait and bounded slowdown (replay_agreement.py).
#   replay_agreement.sh BUILD_DIR [JOBS [SEED [OUT]]]
# With MAX_MEAN_ABS_START_S / MIN_SPEARMAN set, exits 1 when the agreement is worse. Exits 77
# when no cluster can be started here.
#   AGREE_PLUGINS=1   the mlprio plugins too: a model trained (mlprio-model) on a history of the
#                     same kind of jobs, and slurm.conf Including sched.conf, whose lines load
#                     site_factor/mlprio (SITE alone orders: no slurmdbd, so no age) and
#                     job_submit/mlprio, which fills the limit of the jobs that give none
#                     (AGREE_NO_LIMIT of them, default 0.3)
#   AGREE_HISTORY_MS  the plugin's history_period_ms (default 1000; 0: SITE from the model
#                     file's snapshot only, no live history)
#   AGREE_GAP         mean seconds between submissions (default 4)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=$(cd "$1" && pwd)
JOBS=${2:-40}
SEED=${3:-1}
OUT=${4:-$BUILD/replay_agreement}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
GAP=${AGREE_GAP:-4}
NO_LIMIT=0
if [ "${AGREE_PLUGINS:-0}" = 1 ]; then
  NO_LIMIT=${AGREE_NO_LIMIT:-0.3}
  /usr/bin/python3 "$(dirname "$0")/replay_agreement.py" train 400 $((SEED + 1000)) \
    "${CL_NODE_CPUS:-16}" "$OUT/train.swf"
  "$BUILD/bin/mlprio-model" train --trace "$OUT/train.swf" -o "$OUT/model.json" >"$OUT/train.log" 2>&1 ||
    { cat "$OUT/train.log"; exit 1; }
  chmod 0644 "$OUT/model.json"
  cat >"$OUT/sched.conf" <<CONF
PriorityType=priority/multifactor
PriorityWeightAge=1000
PriorityWeightFairshare=0
PriorityWeightJobSize=0
PriorityWeightPartition=0
PriorityWeightQOS=0
SchedulerType=sched/backfill
PrioritySiteFactorPlugin=site_factor/mlprio
PrioritySiteFactorParameters=model=$OUT/model.json,weight=10000,max_boost=100000,history_period_ms=${AGREE_HISTORY_MS:-1000}
JobSubmitPlugins=mlprio
CONF
  export CLUSTER_SCHED_INCLUDE="$OUT/sched.conf"
fi
export MLPRIO_BUILD="$BUILD" CLUSTER_PLUGINS=0
export CL_NODE_CPUS=${CL_NODE_CPUS:-16}
export CLUSTER_EXTRA_CONF="SlurmdParameters=config_overrides
${CLUSTER_EXTRA_CONF:-}"
# shellcheck source=cluster.sh
. "$HERE/cluster.sh"
cluster_skip_unless_possible
/usr/bin/python3 -c "import h5py" 2>/dev/null ||
  { echo "SKIP: python3 with h5py needed"; exit 77; }
poller=""
trap '[ -n "$poller" ] && kill "$poller" 2>/dev/null; cp "$CL_DIR/slurmctld.log" "$OUT/" 2>/dev/null || true; cluster_stop' EXIT
cluster_start "" || { echo "cluster did not start"; exit 1; }
PY="/usr/bin/python3 $HERE/replay_agreement.py"

$PY workload "$JOBS" "$SEED" "$CL_NODE_CPUS" "$OUT/workload.json" "$GAP" "$NO_LIMIT"
echo "replay_agreement: submitting $JOBS jobs on a node of $CL_NODE_CPUS CPUs (seed $SEED)"
# With the plugins, every job's SITE and priority as sprio shows them while it waits (OUT/sprio.txt:
# seconds since the first submission, job id, SITE, priority), to compare with the replay's.
if [ "${AGREE_PLUGINS:-0}" = 1 ]; then
  (t0=$(date +%s); while :; do
     sprio -h -o "%i %S %Y" 2>/dev/null | awk -v t=$(( $(date +%s) - t0 )) '{print t, $1, $2, $3}'
     sleep 2
   done) >"$OUT/sprio.txt" &
  poller=$!
fi
$PY submit "$OUT/workload.json" "$OUT/ids.txt"
# Every job in the completion log.
wait_for 3600 sh -c "[ \$(grep -c 'JobState=' '$CL_DIR/jobcomp.log' 2>/dev/null || echo 0) -ge $JOBS ]" ||
  { echo "not every job completed"; squeue; exit 1; }
[ -n "$poller" ] && kill "$poller" 2>/dev/null
cp "$CL_DIR/jobcomp.log" "$OUT/jobcomp.log"
cp "$SLURM_CONF" "$OUT/slurm.conf"
$PY swf "$OUT/jobcomp.log" "$OUT/ids.txt" "$CL_NODE_CPUS" "$OUT/real.swf" "$OUT/workload.json"
# The release the cluster runs (cluster.sh's CL_SLURM_VERSION, e.g. 22.05.8), as YY.MM.
release=$(echo "$CL_SLURM_VERSION" | sed -n 's/^\([0-9]*\.[0-9]*\).*/\1/p')
"$BUILD/bin/mlprio-replay" run --trace "$OUT/real.swf" --slurm-conf "$OUT/slurm.conf" \
  --slurm-release "${release:-26.05}" --out "$OUT/replay.h5" --json >"$OUT/replay.json" 2>"$OUT/replay.err" ||
  { cat "$OUT/replay.err"; exit 1; }
sprio_arg=()
[ "${AGREE_PLUGINS:-0}" = 1 ] && sprio_arg=("$OUT/sprio.txt")
$PY compare "$OUT/jobcomp.log" "$OUT/ids.txt" "$OUT/replay.h5" "$OUT/agreement.json" "${sprio_arg[@]}"
/usr/bin/python3 - "$OUT/agreement.json" <<'PY'
import json, os, sys
r = json.load(open(sys.argv[1]))
bad = []
m = os.environ.get("MAX_MEAN_ABS_START_S")
if m and r["start_diff_mean_abs_s"] > float(m):
    bad.append("mean |start difference| %.1f s > %s s" % (r["start_diff_mean_abs_s"], m))
s = os.environ.get("MIN_SPEARMAN")
if s and r["start_order_spearman"] < float(s):
    bad.append("start-order rank correlation %.3f < %s" % (r["start_order_spearman"], s))
if bad:
    sys.exit("replay_agreement: " + "; ".join(bad))
PY
