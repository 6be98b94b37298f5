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
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=$(cd "$1" && pwd)
JOBS=${2:-40}
SEED=${3:-1}
OUT=${4:-$BUILD/replay_agreement}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export MLPRIO_BUILD="$BUILD" CLUSTER_PLUGINS=0
export CL_NODE_CPUS=${CL_NODE_CPUS:-16}
export CLUSTER_EXTRA_CONF="SlurmdParameters=config_overrides
${CLUSTER_EXTRA_CONF:-}"
# shellcheck source=cluster.sh
. "$HERE/cluster.sh"
cluster_skip_unless_possible
/usr/bin/python3 -c "import h5py" 2>/dev/null ||
  { echo "SKIP: python3 with h5py needed"; exit 77; }
trap 'cp "$CL_DIR/slurmctld.log" "$OUT/" 2>/dev/null || true; cluster_stop' EXIT
cluster_start "" || { echo "cluster did not start"; exit 1; }
PY="/usr/bin/python3 $HERE/replay_agreement.py"

$PY workload "$JOBS" "$SEED" "$CL_NODE_CPUS" "$OUT/workload.json"
echo "replay_agreement: submitting $JOBS jobs on a node of $CL_NODE_CPUS CPUs (seed $SEED)"
$PY submit "$OUT/workload.json" "$OUT/ids.txt"
# Every job in the completion log.
wait_for 1800 sh -c "[ \$(grep -c 'JobState=COMPLETED' '$CL_DIR/jobcomp.log' 2>/dev/null || echo 0) -ge $JOBS ]" ||
  { echo "not every job completed"; squeue; exit 1; }
cp "$CL_DIR/jobcomp.log" "$OUT/jobcomp.log"
cp "$SLURM_CONF" "$OUT/slurm.conf"
$PY swf "$OUT/jobcomp.log" "$OUT/ids.txt" "$CL_NODE_CPUS" "$OUT/real.swf"
# The release the cluster runs (cluster.sh's CL_SLURM_VERSION, e.g. 22.05.8), as YY.MM.
release=$(echo "$CL_SLURM_VERSION" | sed -n 's/^\([0-9]*\.[0-9]*\).*/\1/p')
"$BUILD/bin/mlprio-replay" run --trace "$OUT/real.swf" --slurm-conf "$OUT/slurm.conf" \
  --slurm-release "${release:-26.05}" --out "$OUT/replay.h5" --json >"$OUT/replay.json" 2>"$OUT/replay.err" ||
  { cat "$OUT/replay.err"; exit 1; }
$PY compare "$OUT/jobcomp.log" "$OUT/ids.txt" "$OUT/replay.h5" "$OUT/agreement.json"
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
