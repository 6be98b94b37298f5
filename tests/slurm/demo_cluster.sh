#!/usr/bin/env bash
# The demo's Slurm step: a throw-away cluster on loopback (cluster.sh) with site_factor/mlprio
# and job_submit/mlprio loaded and the demo's model, the example LLM fine-tuning scripts from
# jobs/ submitted, what sbatch said, the time limits the plugin set and sprio's SITE column shown,
# with the FSDP minibatch advice for the T5-3B script past the retry cliff; then everything stopped. The test cluster has no GPUs and two cores, so the scripts' GPU,
# CPU and memory requests are overridden on the command line and the jobs go to a DOWN
# partition, where they stay pending.
#   demo_cluster.sh BUILD_DIR MODEL_FILE OUT_DIR
set -uo pipefail
MLPRIO_BUILD=$(cd "$1" && pwd) || exit 1
model=$2
out=$3
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=cluster.sh
. "$HERE/cluster.sh"
cluster_skip_unless_possible
mkdir -p "$out"
# slurmctld refuses a model file others can write; keep a private copy.
install -m 0644 "$model" "$out/model.json"
trap 'cluster_stop' EXIT
trap 'exit 1' INT TERM
KEEP_CLUSTER_DIR=""
# The FSDP advice table (issue 16) for jobs/finetune_t5_3b_fsdp.sbatch, when mlprio-fsdp is built.
fsdp=""
if [ -x "$MLPRIO_BUILD/bin/mlprio-fsdp" ] &&
   "$MLPRIO_BUILD/bin/mlprio-fsdp" table --models t5-3b-s128-t128 --gpus a100-80gb:80 \
     -o "$out/fsdp_table.json" >"$out/fsdp_table.txt" 2>&1; then
  chmod 644 "$out/fsdp_table.json"
  fsdp=",fsdp_table=$out/fsdp_table.json"
  echo "FSDP advice table (mlprio-fsdp table):"
  sed 's/^/  /' "$out/fsdp_table.txt"
fi
cluster_start "model=$out/model.json,weight=10000,max_boost=100000,limit_margin=0.25$fsdp" ||
  { echo "the cluster did not start"; exit 1; }
grep -h "mlprio" "$CL_DIR/slurmctld.log" | grep -iE "loaded|model" | head -4
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
  echo "sprio (SITE comes from site_factor/mlprio):"
  sleep 2
  sprio -o "%.8i %.10Y %.10A %.10S" 2>&1 | head -10
fi
cp "$CL_DIR/slurmctld.log" "$out/slurmctld.log" 2>/dev/null
