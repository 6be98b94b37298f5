#!/usr/bin/env bash
# Added sbatch latency of job_submit/mlprio + site_factor/mlprio: starts the loopback test
# cluster (tests/slurm/cluster.sh) twice, without and with the plugins, submits N jobs without
# -t to a DOWN partition (so the plugin fills the time limit and nothing runs) and prints
# mean/p50/p99 of sbatch's wall time for each. With P > 1 it is a burst: P submitters at once,
# N jobs in all, and it also prints the throughput (jobs/s over the burst's wall time), the
# failed submissions and how many "very large processing time" warnings slurmctld logged (RPCs
# over 3 s; the log level is raised to verbose for that).
# MaxJobCount is raised to N + 1000 so that the held jobs fit. Needs root, munge and Slurm.
#   bench/plugin_sbatch_latency.sh BUILD_DIR [N=200] [P=1]
set -uo pipefail
MLPRIO_BUILD=$(cd "${1:?usage: $0 BUILD_DIR [N]}" && pwd) || exit 1
N=${2:-200}
P=${3:-1}
export CLUSTER_EXTRA_CONF="MaxJobCount=$((N + 1000))"
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../tests/slurm/cluster.sh"
cluster_skip_unless_possible
M=$(mktemp -d /tmp/mlprio-bench.XXXXXX)
chmod 755 "$M"
trap 'cluster_stop; rm -rf "$M"' EXIT
"$MLPRIO_BUILD/bin/mlprio_slurm_testmodel" "$M/model.json" --user root --last-run 3300 || exit 1

submitter() {  # $1: label, $2: submitter index; N/P jobs (the first takes the remainder)
  local k=$(( N / P )) t0 t1 i
  [ "$2" = 0 ] && k=$(( k + N % P ))
  for i in $(seq "$k"); do
    t0=$(date +%s%N)
    if sbatch -p hold -o /dev/null -J "llama-7b-lora16-$2-$i" --wrap 'sleep 1' >/dev/null 2>&1; then
      t1=$(date +%s%N)
      echo $(( (t1 - t0) / 1000 ))
    else
      echo fail
    fi
  done > "$M/lat.$1.$2"
}

measure() {
  local label=$1 t0 t1 s
  # slurmctld logs "very large processing time" (an RPC over 3 s, src/common/timers.c) at the
  # verbose level, above the cluster's SlurmctldDebug=info: raise it for the burst.
  scontrol setdebug verbose >/dev/null 2>&1 || echo "scontrol setdebug verbose failed"
  t0=$(date +%s%N)
  for s in $(seq 0 $(( P - 1 ))); do submitter "$label" "$s" & done
  wait
  t1=$(date +%s%N)
  cat "$M"/lat."$label".* | grep -v fail | sort -n | awk -v l="$label" -v w=$(( (t1 - t0) / 1000000 )) \
    -v f="$(cat "$M"/lat."$label".* | grep -c fail)" -v p="$P" '{a[NR]=$1; s+=$1}
    END {if (NR == 0) {printf "%-16s all %d submissions failed\n", l, f; exit}
         i50=int(NR*0.50); if (i50<1) i50=1; i99=int(NR*0.99); if (i99<1) i99=1;
         printf "%-16s n=%d P=%d failed=%d wall=%.1f s throughput=%.1f jobs/s mean=%.2f ms p50=%.2f ms p99=%.2f ms\n",
         l, NR, p, f, w/1000, NR/(w/1000), s/NR/1000, a[i50]/1000, a[i99]/1000}'
  echo "$label: slurmctld 'very large processing time' warnings: $(grep -c "very large processing time" "$CL_DIR/slurmctld.log")"
}

for plugins in 0 1; do
  CLUSTER_PLUGINS=$plugins cluster_start "model=$M/model.json" || { echo "cluster did not start"; exit 1; }
  for _ in 1 2 3 4 5; do sbatch -p hold -o /dev/null --wrap true >/dev/null 2>&1; done  # warm-up
  if [ "$plugins" = 1 ]; then
    grep -q "site_factor/mlprio: model loaded" "$CL_DIR/slurmctld.log" || { echo "plugin not loaded"; exit 1; }
    measure with_plugins
  else
    measure without_plugins
  fi
  cluster_stop
done
