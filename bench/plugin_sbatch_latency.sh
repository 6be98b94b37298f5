#!/usr/bin/env bash
# Added sbatch latency of job_submit/mlprio + site_factor/mlprio: starts the loopback test
# cluster (tests/slurm/cluster.sh) twice, without and with the plugins, submits N jobs without
# -t to a DOWN partition (so the plugin fills the time limit and nothing runs) and prints
# mean/p50/p99 of sbatch's wall time for each. Needs root, munge and Slurm, like the tests.
#   bench/plugin_sbatch_latency.sh BUILD_DIR [N=200]
set -uo pipefail
MLPRIO_BUILD=$(cd "${1:?usage: $0 BUILD_DIR [N]}" && pwd) || exit 1
N=${2:-200}
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../tests/slurm/cluster.sh"
cluster_skip_unless_possible
M=$(mktemp -d /tmp/mlprio-bench.XXXXXX)
chmod 755 "$M"
trap 'cluster_stop; rm -rf "$M"' EXIT
"$MLPRIO_BUILD/bin/mlprio_slurm_testmodel" "$M/model.json" --user root --last-run 3300 || exit 1

measure() {
  local label=$1 t0 t1
  : > "$M/lat.$label"
  for i in $(seq "$N"); do
    t0=$(date +%s%N)
    sbatch -p hold -o /dev/null -J "llama-7b-lora16-$i" --wrap 'sleep 1' >/dev/null 2>&1 || { echo "sbatch failed"; return 1; }
    t1=$(date +%s%N)
    echo $(( (t1 - t0) / 1000 )) >> "$M/lat.$label"
  done
  sort -n "$M/lat.$label" | awk -v l="$label" '{a[NR]=$1; s+=$1}
    END {i50=int(NR*0.50); if (i50<1) i50=1; i99=int(NR*0.99); if (i99<1) i99=1;
         printf "%-16s n=%d mean=%.2f ms p50=%.2f ms p99=%.2f ms\n", l, NR, s/NR/1000,
         a[i50]/1000, a[i99]/1000}'
}

for plugins in 0 1; do
  CLUSTER_PLUGINS=$plugins cluster_start "model=$M/model.json" || { echo "cluster did not start"; exit 1; }
  for _ in 1 2 3 4 5; do sbatch -p hold -o /dev/null --wrap true >/dev/null 2>&1; done  # warm-up
  if [ "$plugins" = 1 ]; then
    grep -q "site_factor/mlprio: model loaded" "$CL_DIR/slurmctld.log" || { echo "plugin not loaded"; exit 1; }
    measure with_plugins
    grep "very large processing time" "$CL_DIR/slurmctld.log" | head -3
  else
    measure without_plugins
  fi
  cluster_stop
done
