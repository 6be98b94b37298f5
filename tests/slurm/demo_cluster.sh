#!/usr/bin/env bash
# The demo's Slurm step: a throw-away cluster on loopback (cluster.sh) with slurmdbd accounting
# whose slurm.conf Includes SCHED_FILE, the scheduling lines the demo's deployed-stack replay read
# (priority/multifactor's weights, sched/backfill, site_factor/mlprio with the demo's model and
# job_submit/mlprio), unchanged. It shows what slurmctld loaded from them (scontrol show config),
# submits the example LLM fine-tuning scripts from jobs/, what sbatch said, the time limits the
# plugin set and sprio's factors (SITE from site_factor/mlprio), with the FSDP minibatch advice
# for the T5-3B script past the retry cliff when the file names an advice table; then everything
# is stopped. The test cluster has no GPUs and two cores, so the scripts' GPU, CPU and memory
# requests are overridden on the command line and the jobs go to a DOWN partition, where they
# stay pending.
#   demo_cluster.sh BUILD_DIR SCHED_FILE OUT_DIR
set -uo pipefail
MLPRIO_BUILD=$(cd "$1" && pwd) || exit 1
sched=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
out=$3
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=cluster.sh
. "$HERE/cluster.sh"
cluster_skip_unless_possible
mkdir -p "$out"
trap 'cluster_stop' EXIT
trap 'exit 1' INT TERM
KEEP_CLUSTER_DIR=""
export CLUSTER_SCHED_INCLUDE="$sched" CLUSTER_DBD=1
echo "slurm.conf: Include $sched (sha256 $(sha256sum "$sched" | cut -c1-16)...)"
cluster_start "" || { echo "the cluster did not start"; exit 1; }
echo "slurmctld loaded (scontrol show config):"
scontrol show config | grep -iE "^(PriorityType|PriorityWeight(Age|Fairshare|JobSize|Partition)|PriorityMaxAge|PriorityDecayHalfLife|SchedulerType|JobSubmitPlugins|AccountingStorageType) " |
  sed 's/  */ /; s/^/  /'
grep -h "mlprio" "$CL_DIR/slurmctld.log" | grep -iE "loaded|model" | head -4
if grep -q "fsdp_table=" "$sched"; then
  echo "FSDP advice table (named by fsdp_table=):"
  sed 's/^/  /' "$(dirname "$sched")/fsdp_table.txt" 2>/dev/null
fi
ids=()
for s in "$HERE"/../../jobs/finetune_*.sbatch; do
  name=$(basename "$s")
  id=$(sbatch --parsable -p hold --gres=none --nodes=1 --ntasks=1 --ntasks-per-node=1 --cpus-per-task=1 --mem=100M -o /dev/null "$s" 2>"$out/$name.err")
  rc=$?
  echo "sbatch $name -> ${id:-refused} $(tr '\n' ' ' < "$out/$name.err")"
  [ $rc -eq 0 ] && ids+=("$id")
done
if [ ${#ids[@]} -gt 0 ]; then
  echo "time limits set by job_submit/mlprio:"
  for id in "${ids[@]}"; do
    scontrol show job "$id" | grep -oE "JobName=[^ ]+|TimeLimit=[^ ]+" | tr '\n' ' '; echo
  done
  echo "sprio (the weights above; SITE comes from site_factor/mlprio):"
  sleep 2
  sprio -o "%.8i %.10Y %.10A %.10F %.10J %.10P %.10S" 2>&1 | head -10
fi
cp "$CL_DIR/slurmctld.log" "$out/slurmctld.log" 2>/dev/null
