#!/usr/bin/env bash
# Cluster tests for site_factor/mlprio and job_submit/mlprio: each case starts a fresh cluster
# (cluster.sh), drives it with the real sbatch/sprio/scontrol, and fails with the slurmctld log
# tail when an expectation does not hold. Exit 77 = skipped (not root, Slurm or plugins missing).
#   cluster_test.sh BUILD_DIR CASE     CASE: abi_check upgrade foreign load order timelimit refuse
#                                            refuse_history refuse_xgb tuned_conf exempt
#                                            exempt_default
#                                            warn reconfig
#                                            reconfig_now reconfig_js_only badmodel async run
#                                            restart_pending fail_order
#                                            llm_good llm_key
#                                            llm_{down,slow,500,garbage,huge,hostile}
#                                            llm_{hang,trickle,error_openai,error_vllm} llm_obey
#                                            dbd_update dbd_loop
#                                            fsdp_warn fsdp_refuse fsdp_badtable
# The llm_* cases run tests/slurm/fake_llm.py (an OpenAI-compatible fake on 127.0.0.1) with
# /usr/bin/python3; the dbd_* cases add MariaDB + slurmdbd (CLUSTER_DBD=1 in cluster.sh).
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
LLM_PID=""
stop_llm() { [ -n "$LLM_PID" ] && kill "$LLM_PID" 2>/dev/null && wait "$LLM_PID" 2>/dev/null; LLM_PID=""; }
trap 'stop_llm; cluster_stop; rm -rf "$M"' EXIT
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

# start_llm MODE: the fake LLM server in the background; sets LLM_PORT (bounded wait).
start_llm() {
  [ -x /usr/bin/python3 ] || { echo "SKIP: /usr/bin/python3 missing (fake LLM server)"; exit $SKIP; }
  rm -f "$M/llm.port"
  /usr/bin/python3 "$HERE/fake_llm.py" "$1" "$M/llm.port" >"$M/llm.log" 2>&1 &
  LLM_PID=$!
  wait_for 10 test -s "$M/llm.port" || { cat "$M/llm.log"; echo "fake LLM server did not start"; exit 1; }
  LLM_PORT=$(cat "$M/llm.port")
}
expect_site() { "$MODEL_TOOL" --expect-site "$1" 10000 ${2:+"$2"}; }  # RUNTIME [FAIL_PROB]
# Last "LLM advisor: ..." counter line of the site factor.
llm_stats() { grep "site_factor/mlprio: LLM advisor: submitted=" "$CL_DIR/slurmctld.log" | tail -1; }
# llm_counter NAME: that counter's value in the last line (empty if none yet).
llm_counter() { llm_stats | grep -o " $1=[0-9]*" | cut -d= -f2; }

# Plain models: no history (run time = request), and root's history: 55 min runs.
"$MODEL_TOOL" "$M/plain.json" || exit 1
"$MODEL_TOOL" "$M/hist.json" --user root --last-run 3300 --fail-rate 0 || exit 1
"$MODEL_TOOL" "$M/failing.json" --user root --last-run 3300 --fail-rate 0.9 || exit 1
BASE="weight=10000,max_boost=100000,limit_margin=0.25"

# set_plugin_version SO X.Y.Z: rewrites the plugin_version symbol in a copy of a plugin, as if it
# had been built for another Slurm (the file offset found as scripts/check-plugin-abi finds it).
set_plugin_version() {
  local so=$1 addr a off="" type sa so_ ss maj min mic
  addr=$(nm -D --defined-only "$so" | awk '$3 == "plugin_version" {print $1}')
  a=$((16#$addr))
  while read -r _ type sa so_ ss; do
    sa=$((16#$sa)) so_=$((16#$so_)) ss=$((16#$ss))
    [ "$sa" -le "$a" ] && [ $((a + 4)) -le $((sa + ss)) ] && { off=$((a - sa + so_)); break; }
  done < <(readelf -SW "$so" | sed -n 's/^ *\[ *[0-9]*\] *//p' | awk 'NF >= 5 {print $1, $2, $3, $4, $5}')
  [ -n "$off" ] || { echo "plugin_version not found in $so"; return 1; }
  IFS=. read -r maj min mic <<<"$2"
  printf "$(printf '\\x%02x\\x%02x\\x%02x\\x00' "$mic" "$((10#$min))" "$maj")" |
    dd of="$so" bs=1 seek="$off" conv=notrunc status=none
}
CHECK_ABI="$HERE/../../scripts/check-plugin-abi"
# From 23.11 "scontrol reconfigure" restarts slurmctld (fini + init of every plugin) instead of
# calling site_factor_p_reconfig() in the running one.
RECONFIG_RESTARTS=0
IFS=. read -r _maj _min _ <<<"$CL_SLURM_VERSION"
[ $((10#$_maj * 100 + 10#$_min)) -ge 2311 ] && RECONFIG_RESTARTS=1

# The lines that show a reconfigure took: up to 23.02 the running plugin's reconfigure hook logs
# "reconfigure: parameters: ..." and "reconfigured (MODEL"; from 23.11 the new slurmctld's init
# logs "parameters: ..." and "loaded, built for Slurm X (MODEL". PATTERN follows "parameters: ".
expect_reconf_params() {  # PATTERN [SECONDS]
  if [ "$RECONFIG_RESTARTS" = 1 ]; then expect_log "site_factor/mlprio: parameters: $1" "${2:-30}"
  else expect_log "site_factor/mlprio: reconfigure: parameters: $1" "${2:-30}"; fi
}
RECONF_MODEL_RE="site_factor/mlprio: reconfigured ("
[ "$RECONFIG_RESTARTS" = 1 ] && RECONF_MODEL_RE="site_factor/mlprio: loaded, built for Slurm $CL_SLURM_VERSION ("
# The n-th (default: 2nd with a restart, 1st without) model line of a (re)load: PATTERN follows "(".
expect_reconf_model() {  # PATTERN [SECONDS]
  local want=1
  [ "$RECONFIG_RESTARTS" = 1 ] && want=2
  wait_for "${2:-30}" sh -c "[ \"\$(grep -c -- \"\$1\" \"\$2\")\" -ge $want ]" _ "$RECONF_MODEL_RE$1" "$CL_DIR/slurmctld.log" ||
    fail "log lacks ($want times): $RECONF_MODEL_RE$1"
}

case "$CASE" in
abi_check)
  # scripts/check-plugin-abi reads plugin_version out of the built plugins: they match the
  # installed slurmctld; a copy claiming the next micro version does not (exit 1, named);
  # something that is no plugin cannot be judged (exit 2).
  v=$CL_SLURM_VERSION
  next_v="${v%.*}.$(( ${v##*.} + 1 ))"
  "$CHECK_ABI" "$CL_PLUGIN_DIR" || fail "the built plugins do not match slurmctld $v"
  "$CHECK_ABI" --expect "$next_v" "$CL_PLUGIN_DIR" >"$M/out" && fail "--expect $next_v passed"
  cat "$M/out"
  grep -q "MISMATCH .*job_submit_mlprio.so: built for Slurm $v, slurmctld is $next_v" "$M/out" || fail "no mismatch line"
  mkdir -p "$M/p" && cp "$CL_PLUGIN_DIR"/*.so "$M/p/"
  set_plugin_version "$M/p/job_submit_mlprio.so" "$next_v" || fail "patching"
  "$CHECK_ABI" "$M/p" >"$M/out"; rc=$?
  cat "$M/out"
  [ "$rc" -eq 1 ] || fail "patched plugin: exit $rc, expected 1"
  grep -q "MISMATCH .*job_submit_mlprio.so: built for Slurm $next_v" "$M/out" || fail "patched plugin not named"
  grep -q "^ok .*site_factor_mlprio.so" "$M/out" || fail "the unpatched plugin is not ok"
  "$CHECK_ABI" "$M/plain.json" >/dev/null 2>&1; rc=$?
  [ "$rc" -eq 2 ] || fail "a non-plugin gave exit $rc, expected 2"
  echo "exit codes as expected"
  finish
  ;;
upgrade)
  # What a point-release upgrade does to plugins built for the old release, on the real
  # slurmctld: here the plugins claim the next micro version instead (the same inequality).
  # A refused job_submit plugin is fatal at startup; a refused site factor is not up to 23.02
  # (slurmctld tries to load it again at every priority calculation), and fatal from 23.11. check-plugin-abi says so
  # before the restart.
  v=$CL_SLURM_VERSION
  next_v="${v%.*}.$(( ${v##*.} + 1 ))"
  mkdir -p "$M/p" && cp "$CL_PLUGIN_DIR"/*.so "$M/p/"
  set_plugin_version "$M/p/job_submit_mlprio.so" "$next_v" || fail "patching"
  start "model=$M/plain.json,$BASE"
  _kill_pidfile "$CL_DIR/slurmctld.pid"
  : >"$CL_DIR/slurmctld.log"
  sed -i "s#^PluginDir=.*#PluginDir=$CL_SLURM_PLUGINS:$M/p#" "$SLURM_CONF"
  "$CHECK_ABI" "$M/p" >"$M/out" && fail "check-plugin-abi passed plugins slurmctld refuses"
  cat "$M/out"
  timeout 60 "$CL_SBIN/slurmctld" -D -f "$SLURM_CONF" >"$M/ctld.out" 2>&1; rc=$?
  echo "slurmctld exited with $rc"
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "slurmctld did not fail (exit $rc)"
  grep -h "Incompatible\|fatal" "$CL_DIR/slurmctld.log" "$M/ctld.out" | sort -u
  grep -q "Incompatible Slurm plugin $M/p/job_submit_mlprio.so version ($next_v)" "$CL_DIR/slurmctld.log" ||
    fail "no 'Incompatible Slurm plugin' line"
  grep -q "fatal: failed to initialize job_submit plugin" "$CL_DIR/slurmctld.log" "$M/ctld.out" ||
    fail "no 'failed to initialize job_submit plugin' fatal"
  # Only the site factor refused: slurmctld runs, neutral SITE, and retries the load per job.
  cp "$CL_PLUGIN_DIR/job_submit_mlprio.so" "$M/p/"
  set_plugin_version "$M/p/site_factor_mlprio.so" "$next_v" || fail "patching"
  : >"$CL_DIR/slurmctld.log"
  if [ "$RECONFIG_RESTARTS" = 1 ]; then
    # 23.11+: priority/multifactor makes a site factor that cannot load fatal too.
    timeout 60 "$CL_SBIN/slurmctld" -D -f "$SLURM_CONF" >"$M/ctld.out" 2>&1; rc=$?
    echo "slurmctld with a refused site factor exited with $rc"
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "slurmctld did not fail (exit $rc)"
    grep -q "Incompatible Slurm plugin $M/p/site_factor_mlprio.so" "$CL_DIR/slurmctld.log" ||
      fail "no 'Incompatible Slurm plugin' line for the site factor"
    grep -q "fatal: Failed to initialize site_factor plugin" "$CL_DIR/slurmctld.log" "$M/ctld.out" ||
      fail "no 'Failed to initialize site_factor plugin' fatal"
  else
    "$CL_SBIN/slurmctld" -f "$SLURM_CONF" >"$M/ctld.out" 2>&1 || fail "slurmctld did not start"
    wait_for 20 scontrol ping || fail "slurmctld not answering with a refused site factor"
    for _ in 1 2 3; do submit -p hold -t 5 >/dev/null || fail "sbatch"; done
    n=$(grep -c "Incompatible Slurm plugin $M/p/site_factor_mlprio.so" "$CL_DIR/slurmctld.log")
    echo "site factor load attempts: $n"
    [ "$n" -ge 4 ] || fail "expected a load attempt at start and per job, saw $n"
    grep -q "cannot create site_factor context for site_factor/mlprio" "$CL_DIR/slurmctld.log" ||
      fail "no 'cannot create site_factor context' line"
    cluster_alive || fail "slurmctld died"
  fi
  # Fixed: the matching build is back, and the check agrees.
  cp "$CL_PLUGIN_DIR"/*.so "$M/p/"
  "$CHECK_ABI" "$M/p" || fail "check-plugin-abi after the fix"
  ;;
foreign)
  # Plugins really compiled for another Slurm release (the build matrix, lib/slurm-X.Y.Z), not
  # patched: slurmctld names the version and refuses; for JobSubmitPlugins that is fatal.
  other=""
  for d in "$MLPRIO_BUILD"/lib/slurm-*; do
    [ -f "$d/job_submit_mlprio.so" ] && [ "${d##*/slurm-}" != "$CL_SLURM_VERSION" ] && { other=$d; break; }
  done
  [ -n "$other" ] || { echo "SKIP: no plugins built for another Slurm (scripts/slurm-matrix)"; exit $SKIP; }
  ov=${other##*/slurm-}
  start "model=$M/plain.json,$BASE"
  _kill_pidfile "$CL_DIR/slurmctld.pid"
  : >"$CL_DIR/slurmctld.log"
  sed -i "s#^PluginDir=.*#PluginDir=$CL_SLURM_PLUGINS:$other#" "$SLURM_CONF"
  "$CHECK_ABI" "$other" >"$M/out" && fail "check-plugin-abi passed plugins built for $ov"
  cat "$M/out"
  timeout 60 "$CL_SBIN/slurmctld" -D -f "$SLURM_CONF" >"$M/ctld.out" 2>&1; rc=$?
  echo "slurmctld $CL_SLURM_VERSION with plugins built for $ov exited with $rc"
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "slurmctld did not fail (exit $rc)"
  grep -h "Incompatible\|fatal" "$CL_DIR/slurmctld.log" "$M/ctld.out" | sort -u
  grep -q "Incompatible Slurm plugin $other/job_submit_mlprio.so version ($ov)" "$CL_DIR/slurmctld.log" ||
    fail "no 'Incompatible Slurm plugin ... version ($ov)' line"
  grep -q "fatal: failed to initialize job_submit plugin" "$CL_DIR/slurmctld.log" "$M/ctld.out" ||
    fail "no 'failed to initialize job_submit plugin' fatal"
  ;;
load)
  start "model=$M/plain.json,$BASE,bogus_key=1"
  expect_log "site_factor/mlprio: model loaded: formula model"
  v=$CL_SLURM_VERSION
  expect_log "site_factor/mlprio: loaded, built for Slurm $v (formula model"
  expect_log "job_submit/mlprio: loaded, built for Slurm $v; decides with the model of site_factor/mlprio"
  expect_log "unknown parameter 'bogus_key' ignored"
  # No llm_url: libcurl (opened only when an advisor starts) is not in slurmctld's memory.
  if grep -q "libcurl" "/proc/$(cat "$CL_DIR/slurmctld.pid")/maps"; then
    fail "slurmctld maps libcurl although no LLM advisor is configured"
  fi
  # Every parameter in force, defaults included (scontrol show config prints (null) in 22.05).
  expect_log "site_factor/mlprio: parameters: model=$M/plain.json,weight=10000,max_boost=100000,limit_margin=0.25,refuse_above=1,refuse_mode=warn,llm_url=,.*,reload_wait_ms=1000,fsdp_table=,fsdp_refuse_oom=0,fsdp_gpu_gib=,fsdp_default_gpu_gib=80$"
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
  # No job id exists in job_submit: the note in AdminComment lets the site factor log it.
  scontrol show job "$id" | grep -q "AdminComment=.*mlprio_limit=01:09:00" || fail "no mlprio_limit note"
  # The short reason for its SITE, where `scontrol show job` shows it.
  scontrol show job "$id" | grep -q "AdminComment=.*mlprio_pred=00:55:00 mlprio_pfail=0.00" ||
    fail "no mlprio_pred/mlprio_pfail reason in AdminComment"
  expect_log "job_submit/mlprio: job from uid 0 (root) name wrap: mlprio: time limit set to 01:09:00"
  expect_log "site_factor/mlprio: JobId=$id user=root: mlprio_limit=01:09:00$"
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
refuse_history)
  # root's history alone (90% of its jobs failed): the refusal names history features, not the
  # LLM parameters this plain job does not have. sbatch and srun both go through job_submit.
  start "model=$M/failing.json,$BASE,refuse_above=0.5,refuse_mode=refuse"
  if sbatch -p hold -t 1 -o /dev/null --wrap true 2>"$M/err"; then fail "sbatch was not refused"; fi
  if timeout 30 srun -p hold -t 1 true 2>"$M/err2"; then fail "srun was not refused"; fi
  for f in "$M/err" "$M/err2"; do
    cat "$f"
    grep -q "mostly because of the failure rate of your recent jobs (hist_fail_rate=0.9)" "$f" ||
      fail "$(basename "$f"): the reason is not the user's failure rate"
    grep -q "This comes from your recent jobs" "$f" || fail "$(basename "$f"): no history advice"
    grep -qi "LoRA\|batch size\|sequence length\|memory per GPU" "$f" &&
      fail "$(basename "$f"): the message blames LLM parameters"
  done
  expect_log "job_submit/mlprio: refused job from uid 0 (root) name wrap: failure probability 0.90; top reasons hist_fail_rate=0.9 (+0.9)"
  expect_log "job_submit/mlprio: refused job from uid 0 (root) name true: failure probability 0.90"
  ;;
refuse_xgb)
  # An XGBoost model (the kind slurmctld had not loaded before) trained on a sacct dump where
  # root's jobs fail 85% of the time: the reason comes from TreeSHAP over its failure trees in
  # slurmctld, and names history (user, hist_*), never LLM parameters.
  TOOL="$MLPRIO_BUILD/bin/mlprio-model"
  [ -x "$TOOL" ] || { echo "SKIP: $TOOL not built (no XGBoost)"; exit $SKIP; }
  [ -x /usr/bin/python3 ] || { echo "SKIP: /usr/bin/python3 missing (reads explain's JSON)"; exit $SKIP; }
  awk -f "$HERE/gen_sacct.awk" > "$M/dump.txt" || fail "gen_sacct.awk"
  "$TOOL" train --trace "$M/dump.txt" --format sacct --kind xgboost --nthread 1 -o "$M/xgb.json" >"$M/train.out" 2>&1 ||
    { cat "$M/train.out"; fail "mlprio-model train"; }
  chmod 644 "$M/xgb.json"
  start "model=$M/xgb.json,$BASE,refuse_above=0.5,refuse_mode=refuse"
  expect_log "site_factor/mlprio: model loaded: xgboost model"
  if sbatch -p hold -t 1 -o /dev/null --wrap true 2>"$M/err"; then fail "sbatch was not refused"; fi
  cat "$M/err"
  grep -q "predicted to fail with probability 0\.[5-9]" "$M/err" || fail "no refusal"
  grep -q "mostly because of .*(\(user\|hist_[a-z0-9_]*\)" "$M/err" || fail "the reason names no history feature"
  grep -q "This comes from your recent jobs" "$M/err" || fail "no history advice"
  grep -qi "llm_\|LoRA\|batch size\|sequence length\|memory per GPU" "$M/err" &&
    fail "the message blames LLM parameters"
  # The same contributions as mlprio-model explain (XGBoost's own pred_contribs): its top feature.
  top=$("$TOOL" explain --model "$M/xgb.json" --job "user=root,req_time=60" |
        /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["fail_features"][0]["feature"])')
  echo "mlprio-model explain: top failure feature $top"
  grep -q "mostly because of [^(]*($top[=)]" "$M/err" || fail "first reason is not explain's top feature $top"
  grep "refused job" "$CL_DIR/slurmctld.log" | tail -1
  ;;
tuned_conf)
  # What `mlprio-replay tune --slurm-conf` writes loads in slurmctld unchanged: a site's
  # scheduling lines tuned on a generated workload with users; the cluster's slurm.conf Includes
  # the tuned file, whose PrioritySiteFactorParameters name the tuned model file.
  TOOL="$MLPRIO_BUILD/bin/mlprio-model"
  REPLAY="$MLPRIO_BUILD/bin/mlprio-replay"
  [ -x "$TOOL" ] || { echo "SKIP: $TOOL not built (no XGBoost)"; exit $SKIP; }
  "$REPLAY" generate --jobs 1500 --nodes 32 --users 8 --seed 5 -q -o "$M/t.swf" || fail "generate"
  "$TOOL" train --trace "$M/t.swf" --train-fraction 0.8 --nthread 1 -o "$M/m.json" >"$M/train.out" 2>&1 ||
    { cat "$M/train.out"; fail "mlprio-model train"; }
  cat >"$M/site.conf" <<CONF
SchedulerType=sched/backfill
PriorityType=priority/multifactor
PriorityWeightAge=1000
PriorityWeightJobSize=1000
PrioritySiteFactorParameters=history_period_ms=1000
CONF
  "$REPLAY" tune --trace "$M/t.swf" --model "$M/m.json" --train-fraction 0.8 \
    --slurm-conf "$M/site.conf" --slurm-conf-out "$M/tuned.conf" -o "$M/tuned.json" \
    --windows 4x300 --loads 1 --site-weights 5000,10000 --json >"$M/tune.json" 2>"$M/tune.err" ||
    { cat "$M/tune.err"; fail "mlprio-replay tune --slurm-conf"; }
  cat "$M/tuned.conf"
  grep -q "^PrioritySiteFactorPlugin=site_factor/mlprio$" "$M/tuned.conf" ||
    fail "tune chose no SITE on a workload with users"
  grep -q "^PrioritySiteFactorParameters=model=$M/tuned.json,weight=[0-9]*,max_boost=[0-9]*,history_period_ms=1000$" \
    "$M/tuned.conf" || fail "the plugin line does not name the tuned model with the site's parameters"
  chmod 644 "$M/tuned.json" "$M/tuned.conf"
  CLUSTER_SCHED_INCLUDE="$M/tuned.conf" start ""
  expect_log "site_factor/mlprio: model loaded"
  expect_log "site_factor/mlprio: parameters: model=$M/tuned.json,weight="
  id=$(submit -p hold -t 5) || fail "sbatch"
  sleep 2
  site=$(site_of "$id")
  echo "SITE of job $id: $site"
  [ -n "$site" ] && [ "$site" -gt 0 ] || fail "sprio shows no SITE for job $id"
  ;;
exempt)
  # Ways through a refusal on history alone, each only where the admin enabled it: exempt QOS and
  # accounts, and (allow_override=1, switched on by a reconfigure) the user's --comment token.
  # Accepted jobs carry the note in AdminComment and the site factor logs it with the job id.
  start "model=$M/failing.json,$BASE,refuse_above=0.5,refuse_mode=refuse,exempt_qos=urgent:ops,exempt_accounts=vip"
  refused() {  # refused NAME SBATCH-ARGS...: must be refused
    local name=$1; shift
    if sbatch -p hold -t 1 -o /dev/null "$@" --wrap true 2>"$M/$name.err"; then fail "$name: accepted"; fi
    grep -q "predicted to fail with probability 0.90" "$M/$name.err" || fail "$name: no refusal message"
  }
  accepted() {  # accepted NAME NOTE SBATCH-ARGS...: must be accepted, noted, logged with its id
    local name=$1 note=$2 id; shift 2
    id=$(sbatch --parsable -p hold -t 1 -o /dev/null "$@" --wrap true 2>"$M/$name.err") ||
      { fail "$name: refused: $(cat "$M/$name.err")"; return; }
    cat "$M/$name.err"
    scontrol show job "$id" | grep -q "AdminComment=.*$note mlprio_fail=0.90" ||
      fail "$name: AdminComment of job $id lacks '$note mlprio_fail=0.90'"
    expect_log "site_factor/mlprio: JobId=$id user=root: $note mlprio_fail=0.90"
  }
  refused plain
  refused token_not_allowed --comment=mlprio:override
  grep -q "override" "$M/token_not_allowed.err" && fail "override offered while not allowed"
  refused other_account --account=other
  accepted qos "mlprio_exempt=qos:urgent" --qos=urgent
  grep -q "Not refused: QOS urgent is exempt" "$M/qos.err" || fail "qos: no exemption message"
  accepted account "mlprio_exempt=account:vip" --account=VIP
  grep -q "Not refused: account vip is exempt" "$M/account.err" || fail "account: no exemption message"
  expect_log "job_submit/mlprio: accepted job from uid 0 (root) name wrap despite predicted failure: exempt (qos:urgent)"
  sed -i "s#^PrioritySiteFactorParameters=.*#&,allow_override=1#" "$SLURM_CONF"
  scontrol reconfigure || fail "scontrol reconfigure"
  refused offered
  grep -q "resubmit with --comment=mlprio:override" "$M/offered.err" || fail "the refusal does not offer the override"
  refused not_a_word "--comment=mlprio:overrides please"
  accepted override "mlprio_override=1" "--comment=urgent fix, mlprio:override"
  grep -q "Submitted anyway: --comment=mlprio:override" "$M/override.err" || fail "override: no message"
  expect_log "job_submit/mlprio: accepted job from uid 0 (root) name wrap despite predicted failure: override"
  grep "accepted" "$CL_DIR/slurmctld.log"
  ;;
exempt_default)
  # With accounting, a job that names no account runs under the user's default account: the
  # exemption follows it (read from slurmctld's association cache, as job_submit/lua does).
  export CLUSTER_DBD=1
  start "model=$M/failing.json,$BASE,refuse_above=0.5,refuse_mode=refuse,exempt_accounts=vip"
  if sbatch -p hold -t 1 -o /dev/null --wrap true 2>"$M/err"; then fail "job under root's default account accepted"; fi
  sacctmgr -i add account vip >/dev/null && sacctmgr -i add user root account=vip >/dev/null &&
    sacctmgr -i modify user root set defaultaccount=vip >/dev/null || fail "sacctmgr"
  wait_for 30 sh -c "scontrol show assoc_mgr flags=users users=root | grep -qi 'DefAccount=vip'" ||
    fail "slurmctld never saw root's new default account"
  id=$(sbatch --parsable -p hold -t 1 -o /dev/null --wrap true 2>"$M/err") ||
    fail "job under the exempt default account refused: $(cat "$M/err")"
  cat "$M/err"
  grep -q "Not refused: account vip is exempt" "$M/err" || fail "no exemption message"
  [ -n "$id" ] && { scontrol show job "$id" | grep -q "Account=vip .*" || fail "job $id is not under vip"; }
  ;;
warn)
  start "model=$M/failing.json,$BASE,refuse_above=0.5,refuse_mode=warn"
  id=$(sbatch --parsable -p hold -t 5 -o /dev/null --wrap 'sleep 1' 2>"$M/err") || fail "warned job was refused"
  cat "$M/err"
  grep -q "predicted to fail with probability 0.90" "$M/err" || fail "warning missing"
  expect_log "site_factor/mlprio: JobId=$id user=root: mlprio_warn=0.90$"
  ;;
reconfig)
  start "model=$M/plain.json,$BASE"
  id=$(submit -p hold -t 5)
  wait_for 30 sh -c "[ \"\$(sprio -h -j $id -o %S | tr -d ' ')\" -gt 0 ]" || fail "SITE was never set for job $id"
  s1=$(site_of "$id")
  cp "$M/plain.json" "$M/plain2.json"
  sed -i "s#^PrioritySiteFactorParameters=.*#PrioritySiteFactorParameters=model=$M/plain2.json,weight=20000,max_boost=100000#" "$SLURM_CONF"
  scontrol reconfigure || fail "scontrol reconfigure"
  if [ "$RECONFIG_RESTARTS" = 1 ]; then
    # 23.11+: reconfigure starts a new slurmctld, which loads the plugins afresh (init).
    expect_log "site_factor/mlprio: parameters: model=$M/plain2.json,weight=20000,max_boost=100000," 30
    expect_log "site_factor/mlprio: loaded, built for Slurm $CL_SLURM_VERSION (formula model" 30
    wait_for 30 scontrol ping || fail "slurmctld not answering after reconfigure"
  else
    expect_log "site_factor/mlprio: reconfigured (formula model" 30
    expect_log "site_factor/mlprio: reconfigure: parameters: model=$M/plain2.json,weight=20000,max_boost=100000,"
  fi
  wait_for 30 sh -c "[ \"\$(sprio -h -j $id -o %S | tr -d ' ')\" -gt $((s1 + s1 / 2)) ]" ||
    fail "SITE did not follow the new weight (before $s1, now $(site_of "$id"))"
  # job_submit/mlprio decides with site_factor/mlprio's model (one model for both).
  submit -p hold -t 5 >/dev/null || fail "sbatch after reconfigure"
  expect_log "job_submit/mlprio: decisions use the model of site_factor/mlprio" 5
  # A changed file on disk is picked up by the watcher (mtime), without reconfigure.
  "$MODEL_TOOL" "$M/plain2.json" --corrupt
  expect_log "model rejected: model file $M/plain2.json" 40
  wait_for 30 sh -c "[ \"\$(sprio -h -j $id -o %S | tr -d ' ')\" = 0 ]" ||
    fail "SITE not neutral after the model file was corrupted ($(site_of "$id"))"
  ;;
reconfig_now|reconfig_js_only)
  # scontrol reconfigure switches job_submit's decisions to the new model at once, in step with
  # the site factor: the very next sbatch is decided by it. The watcher's period is 1 h, so only
  # the reconfigure can load the replaced file. reconfig_js_only loads job_submit/mlprio alone,
  # where nothing but its own fence (the worker loads the re-read configuration while the
  # submission waits) can switch it.
  [ "$CASE" = reconfig_js_only ] && export CLUSTER_PLUGINS=js
  cp "$M/plain.json" "$M/m.json"
  start "model=$M/m.json,$BASE,refuse_above=0.5,refuse_mode=refuse,check_period_ms=3600000"
  # The plain model: no history, no request -> run 3600 s, limit 01:15:00, no failure predicted.
  a=$(sbatch --parsable -p hold -o /dev/null --wrap 'sleep 1' 2>"$M/err") || fail "sbatch A: $(cat "$M/err")"
  grep -q "time limit set to 01:15:00" "$M/err" || fail "job A: no 01:15:00 limit: $(cat "$M/err")"
  # root's history says 90% of its jobs fail.
  cp "$M/failing.json" "$M/new.json" && mv "$M/new.json" "$M/m.json"
  # Before the reconfigure: still the old model (nothing polls the file within the test).
  submit -p hold -t 5 >/dev/null || fail "job B (before reconfigure) refused: $(cat "$M/sbatch.err")"
  scontrol reconfigure || fail "scontrol reconfigure"
  # Immediately: the new model's decision, no waiting.
  if sbatch -p hold -t 5 -o /dev/null --wrap 'sleep 1' 2>"$M/err"; then
    fail "job C after reconfigure was accepted: the old model decided"
  fi
  cat "$M/err"
  grep -q "predicted to fail with probability 0.90" "$M/err" || fail "job C: no refusal from the new model"
  if [ "$CASE" = reconfig_now ]; then
    # The site factor switched at the same reconfigure: job A (limit 4500 s) now has root's 3300 s
    # and root's failure rate 0.9, which lowers the score (score(): likely failures go later).
    want=$(expect_site 3300 0.9)
    wait_for 30 sh -c "[ \"\$(sprio -h -j $a -o %S | tr -d ' ')\" = $want ]" ||
      fail "SITE of job A is $(site_of "$a"), expected $want from the new model"
    expect_log "site_factor/mlprio: reconfigured (formula model" 10
    # The re-prioritisation says how many pending jobs it moved (job A did).
    expect_log "site_factor/mlprio: re-prioritised pending jobs after a model change: [1-9][0-9]* of [1-9]" 10
    # One load for the new configuration, by whichever came first (hook or fence), not two.
    n=$(grep -c "site_factor/mlprio: \(reconfigure\|slurm.conf re-read\): model loaded" "$CL_DIR/slurmctld.log")
    [ "$n" -eq 1 ] || fail "the model was loaded $n times for one reconfigure"
  else
    expect_log "job_submit/mlprio: slurm.conf re-read: model loaded: formula model" 5
  fi
  grep "mlprio: .*\(reconfigure\|re-read\|rejected\)" "$CL_DIR/slurmctld.log" | tail -4
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
fail_order)
  # The admin hazard "users whose jobs usually fail get higher priority" (failed jobs are short):
  # root's jobs fail 80 % of the time and run 10 min, nobody's never fail and run 30 min. The same
  # request from each: the reliable user's job gets the higher SITE, each exactly the score's.
  command -v setpriv >/dev/null || { echo "SKIP: setpriv missing (submits as another user)"; exit $SKIP; }
  "$MODEL_TOOL" "$M/two.json" --user root --last-run 600 --fail-rate 0.8 \
    --user nobody --last-run 1800 --fail-rate 0 || fail "test model"
  start "model=$M/two.json,$BASE"
  a=$(submit -p hold -t 60) || fail "sbatch as root: $(cat "$M/sbatch.err")"
  b=$(setpriv --reuid=65534 --regid=65534 --clear-groups sbatch --parsable -p hold -t 60 \
        -o /dev/null --chdir=/tmp --wrap 'sleep 1' 2>"$M/err") || fail "sbatch as nobody: $(cat "$M/err")"
  want_a=$(expect_site 600 0.8)
  want_b=$(expect_site 1800 0)
  wait_for 15 sh -c "[ \"\$(sprio -h -j $a -o %S | tr -d ' ')\" = $want_a ]" ||
    fail "root's job: SITE $(site_of "$a"), expected $want_a"
  wait_for 15 sh -c "[ \"\$(sprio -h -j $b -o %S | tr -d ' ')\" = $want_b ]" ||
    fail "nobody's job: SITE $(site_of "$b"), expected $want_b"
  echo "80 %-failing user (10 min runs): SITE $want_a; reliable user (30 min runs): SITE $want_b"
  [ "$want_b" -gt "$want_a" ] || fail "the likely failure ranks first ($want_a > $want_b)"
  ;;
restart_pending)
  # slurmctld stopped (SIGTERM) while the plugin's worker has queued work (budget_us=0: every
  # factor is computed there) and 20 LLM requests are in flight (the fake answers after 30 s),
  # then started again from its saved state. Nothing lost means: slurmctld exits on its own
  # within 10 s (the plugin's fini aborts the requests and joins its threads; it is never
  # SIGKILLed here), without a fatal or a crash; all 20 jobs are pending after the restart, each
  # with the model's SITE recomputed by the recovery pass; the answers that were in flight are
  # dropped with the old process, never applied.
  start_llm slow
  start "model=$M/plain.json,$BASE,budget_us=0,llm_url=http://127.0.0.1:$LLM_PORT,llm_timeout_ms=20000"
  expect_log "site_factor/mlprio: LLM advisor started"
  ids=()
  for _ in $(seq 20); do ids+=("$(submit -p hold -t 60)") || fail "sbatch: $(cat "$M/sbatch.err")"; done
  # Not vacuous: the fake has received a request it will not answer for 30 s.
  wait_for 10 grep -q "^request 1 mode=slow" "$M/llm.log" || fail "no LLM request reached the fake"
  pid=$(cat "$CL_DIR/slurmctld.pid")
  t0=$(date +%s%N)
  kill -TERM "$pid"
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && fail "slurmctld still running 10 s after SIGTERM: the plugin held it"
  echo "slurmctld stopped in $(( ($(date +%s%N) - t0) / 1000000 )) ms with an LLM request in flight and $(grep -c '^request' "$M/llm.log") sent"
  grep -E "fatal|Segmentation|core dumped|very large processing time" "$CL_DIR/slurmctld.log" &&
    fail "the stop was not clean"
  : >"$CL_DIR/slurmctld.log"
  "$CL_SBIN/slurmctld" -f "$SLURM_CONF" >"$M/ctld.out" 2>&1 || fail "slurmctld did not start again"
  wait_for 20 scontrol ping || fail "slurmctld not answering after the restart"
  expect_log "site_factor/mlprio: re-scored the pending jobs recovered at start" 30
  want=$(expect_site 3600)
  for id in "${ids[@]}"; do
    wait_for 15 sh -c "[ \"\$(sprio -h -j $id -o %S | tr -d ' ')\" = $want ]" ||
      fail "job $id: SITE $(site_of "$id") after the restart, expected the model's $want"
    squeue -h -j "$id" -o %T | grep -q PENDING || fail "job $id is not pending after the restart"
  done
  echo "all 20 jobs pending after the restart with the model's SITE $want"
  cluster_alive || fail "slurmctld not alive at the end"
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
shadow)
  # mode=shadow: the failing model would refuse root's jobs and fill a 01:09:00 limit, and SITE
  # would be the score's; nothing is applied (the job is accepted, unchanged, SITE 0, sbatch
  # silent), and one line per job with its id records what would have been done, which
  # mlprio-model shadow-report reads against what happened.
  start "model=$M/failing.json,$BASE,refuse_above=0.5,refuse_mode=refuse,mode=shadow"
  expect_log "site_factor/mlprio: parameters: .*,mode=shadow,"
  id=$(sbatch --parsable -p hold -o /dev/null --wrap 'sleep 1' 2>"$M/err") || fail "shadow mode refused the job: $(cat "$M/err")"
  [ -s "$M/err" ] && fail "shadow mode told the user something: $(cat "$M/err")"
  scontrol show job "$id" | grep -q "TimeLimit=UNLIMITED" || fail "shadow mode changed the time limit: $(scontrol show job "$id" | grep -o 'TimeLimit=[^ ]*')"
  expect_log "job_submit/mlprio: shadow: job from uid 0 (root) name wrap: would refuse it (failure probability 0.90), would set time limit 01:09:00"
  want=$(expect_site 3300 0.9)
  expect_log "site_factor/mlprio: shadow: JobId=$id user=root would_site=$want mlprio_shadow_limit=01:09:00 mlprio_shadow_refuse=0.90$"
  s=$(site_of "$id")
  [ "$s" = 0 ] || fail "shadow mode applied SITE $s to job $id"
  # The same job in enforce mode is refused.
  sed -i "s#,mode=shadow#,mode=enforce#" "$SLURM_CONF"
  scontrol reconfigure || fail "reconfigure"
  expect_reconf_params ".*,mode=enforce,"
  if sbatch -p hold -o /dev/null --wrap 'sleep 1' 2>"$M/err"; then fail "enforce mode did not refuse"; fi
  grep -q "predicted to fail with probability 0.90" "$M/err" || fail "no refusal message: $(cat "$M/err")"
  # The summary of the trial: the shadow lines joined with what happened (a sacct-format dump
  # written from the cluster's own record: job $id was cancelled after 0 s).
  scancel "$id"
  printf 'JobID|User|Account|Partition|Submit|Start|End|Elapsed|Timelimit|State|ExitCode|NCPUS|NNodes|ReqMem|JobName\n%s|root|root|hold|2026-01-01T00:00:00|2026-01-01T00:00:10|2026-01-01T00:01:40|00:01:30|UNLIMITED|FAILED|1:0|1|1|1M|wrap\n' "$id" >"$M/sacct.txt"
  "$MLPRIO_BUILD/bin/mlprio-model" shadow-report --log "$CL_DIR/slurmctld.log" --trace "$M/sacct.txt" --format sacct >"$M/report" || fail "shadow-report failed: $(cat "$M/report")"
  cat "$M/report"
  grep -q "jobs recorded in shadow mode: 1, found in the trace: 1" "$M/report" || fail "shadow-report did not find the job"
  grep -q "would refuse or warn: 1 (of which failed: 1" "$M/report" || fail "shadow-report refusals"
  grep -q "would fill a time limit: 1 (of which ran past it: 0" "$M/report" || fail "shadow-report limits"
  ;;
scope)
  # scope_partitions: jobs outside pass unchanged (no limit, SITE 0); a partition's DefaultTime
  # is respected unless override_default_time=1.
  start "model=$M/hist.json,$BASE,scope_partitions=hold:deftime"
  id=$(sbatch --parsable -p short -o /dev/null --wrap 'sleep 1' 2>"$M/err") || fail "sbatch -p short"
  [ -s "$M/err" ] && fail "a job outside the scope got a message: $(cat "$M/err")"
  scontrol show job "$id" | grep -q "TimeLimit=00:30:00" || fail "out-of-scope job's limit is not the partition's MaxTime"
  [ "$(site_of "$id")" = 0 ] || fail "out-of-scope job has SITE $(site_of "$id")"
  id=$(sbatch --parsable -p hold -o /dev/null --wrap 'sleep 1' 2>"$M/err") || fail "sbatch -p hold"
  grep -q "time limit set to 01:09:00" "$M/err" || fail "in-scope job got no limit: $(cat "$M/err")"
  [ "$(site_of "$id")" -gt 0 ] || fail "in-scope job has SITE $(site_of "$id")"
  id=$(sbatch --parsable -p deftime -o /dev/null --wrap 'sleep 1' 2>"$M/err") || fail "sbatch -p deftime"
  [ -s "$M/err" ] && fail "a job under DefaultTime got a message: $(cat "$M/err")"
  scontrol show job "$id" | grep -q "TimeLimit=00:10:00" || fail "DefaultTime=10 was not respected: $(scontrol show job "$id" | grep -o 'TimeLimit=[^ ]*')"
  sed -i "s#scope_partitions=hold:deftime#scope_partitions=hold:deftime,override_default_time=1#" "$SLURM_CONF"
  scontrol reconfigure || fail "reconfigure"
  expect_reconf_params ".*,override_default_time=1,"
  id=$(sbatch --parsable -p deftime -o /dev/null --wrap 'sleep 1' 2>"$M/err") || fail "sbatch -p deftime"
  grep -q "time limit set to 01:09:00 (predicted run 00:55:00 + margin, in place of the partition's DefaultTime)" "$M/err" ||
    fail "override_default_time=1 did not fill: $(cat "$M/err")"
  ;;
jobcomp_loop)
  # Without slurmdbd: slurmctld's own completion log (JobCompType=jobcomp/filetxt) is the
  # training data. 24 jobs run (sleep 1), mlprio-model trains on the log, and after scontrol
  # reconfigure root's next job without -t is predicted from those runs (seconds), not the
  # fixture's 55 minutes.
  TOOL="$MLPRIO_BUILD/bin/mlprio-model"
  [ -x "$TOOL" ] || { echo "SKIP: $TOOL not built"; exit $SKIP; }
  start "model=$M/hist.json,$BASE,history_period_ms=0"
  ids=()
  for i in $(seq 24); do
    ids+=("$(sbatch --parsable -p debug -t $(( i % 5 + 1 )) -o /dev/null --wrap 'sleep 1' 2>/dev/null)") || fail "sbatch"
  done
  for id in "${ids[@]}"; do
    wait_for 90 grep -q "JobId=$id .*JobState=COMPLETED" "$CL_DIR/jobcomp.log" || fail "job $id did not complete"
  done
  head -1 "$CL_DIR/jobcomp.log"
  "$TOOL" train --trace "$CL_DIR/jobcomp.log" --format jobcomp --kind formula --train-fraction 1 -o "$M/jc.json" >"$M/train.out" 2>&1 ||
    fail "mlprio-model train on jobcomp.log: $(tail -5 "$M/train.out")"
  cat "$M/train.out"
  chmod 644 "$M/jc.json"
  sed -i "s#^PrioritySiteFactorParameters=.*#PrioritySiteFactorParameters=model=$M/jc.json,$BASE,history_period_ms=0#" "$SLURM_CONF"
  scontrol reconfigure || fail "scontrol reconfigure"
  expect_reconf_model "formula model"
  sbatch --parsable -p hold -o /dev/null --wrap 'sleep 1' 2>"$M/err" >/dev/null || fail "sbatch"
  cat "$M/err"
  grep -q "(predicted run 00:00:0[0-9] + margin)" "$M/err" || fail "root's prediction does not come from the jobcomp runs: $(cat "$M/err")"
  ;;
hints)
  # Bad hints in --comment are ignored and the user is told which and why; good ones are kept.
  start "model=$M/plain.json,$BASE"
  id=$(sbatch --parsable -p hold -t 5 -o /dev/null --comment "mlprio: model_size=banana seq_len=-5 foo=bar lora_rank=16" --wrap 'sleep 1' 2>"$M/err") ||
    fail "sbatch: $(cat "$M/err")"
  cat "$M/err"
  grep -q "mlprio: ignored: model_size=banana (not a number); seq_len=-5 (out of range: seq_len is tokens, 1..1e8); foo=bar (unknown key" "$M/err" ||
    fail "no 'ignored' message"
  ac=$(scontrol show job "$id" | sed -n 's/.*AdminComment=\(.*\)/\1/p')
  echo "AdminComment=$ac"
  case "$ac" in *lora_rank=16*) ;; *) fail "lora_rank=16 not kept" ;; esac
  case "$ac" in *seq_len*|*model_size*) fail "a bad hint was stored: $ac" ;; esac
  expect_log "job_submit/mlprio: uid 0: job hints ignored: model_size=banana"
  ;;
why)
  # mlprio-why JOBID: the job's features, prediction, score terms and the SITE computed by the
  # plugins' own ABI, beside the SITE slurmctld applied (equal here: no live finishes yet).
  start "model=$M/hist.json,$BASE"
  id=$(submit -p hold -t 60) || fail "sbatch"
  wait_for 20 sh -c "[ \"\$(sprio -h -j $id -o %S | tr -d ' ')\" -gt 0 ]" || fail "SITE never set"
  "$MLPRIO_BUILD/bin/mlprio-why" "$id" >"$M/why" 2>&1 || fail "mlprio-why failed: $(cat "$M/why")"
  cat "$M/why"
  s=$(site_of "$id")
  grep -q "^JobId=$id user=root partition=hold" "$M/why" || fail "no job line"
  grep -q "prediction: run 3300 s" "$M/why" || fail "prediction is not root's 3300 s"
  grep -q "hist_last2_mean *3300" "$M/why" || fail "features lack hist_last2_mean 3300"
  grep -q "req_time *3600" "$M/why" || fail "features lack req_time 3600"
  grep -q "SITE computed = weight x score, capped at max_boost: $s; applied by slurmctld: $s " "$M/why" ||
    fail "computed/applied SITE do not both equal sprio's $s"
  "$MLPRIO_BUILD/bin/mlprio-why" "$id" --json | /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["site_computed"] == d["site_applied"] > 0, d; assert d["score_terms"]["run"] < 0' ||
    fail "--json"
  "$MLPRIO_BUILD/bin/mlprio-why" 999999 >"$M/why" 2>&1 && fail "an unknown job id succeeded"
  grep -q "job 999999: Invalid job id" "$M/why" || fail "unknown job: $(cat "$M/why")"
  ;;
live_history)
  # The plugin learns jobs as they end (no slurmdbd here: the applier scans the job list every
  # history_period_ms), so root's next prediction moves from the model's 55 min (its snapshot:
  # two 3300 s runs) to the mean of the two runs just seen, without retraining.
  start "model=$M/hist.json,$BASE,history_period_ms=1000"
  expect_log "site_factor/mlprio: parameters: .*,history_period_ms=1000,"
  predicted_run() {  # the predicted run job_submit/mlprio reports for a new job of root's
    sbatch --parsable -p hold -o /dev/null --wrap 'sleep 1' 2>"$M/err" >/dev/null || return 1
    sed -n 's/.*(predicted run \([0-9:-]*\) + margin.*/\1/p' "$M/err"
  }
  p0=$(predicted_run)
  [ "$p0" = "00:55:00" ] || fail "before any job ended: predicted run $p0, expected 00:55:00"
  runs=()
  for i in 1 2; do
    id=$(sbatch --parsable -p debug -t 5 -o /dev/null --wrap 'sleep 2' 2>"$M/err") || fail "sbatch: $(cat "$M/err")"
    wait_for 60 grep -q "JobId=$id .*JobState=COMPLETED" "$CL_DIR/jobcomp.log" || fail "job $id did not complete"
    r=$(scontrol show job "$id" | sed -n 's/.*RunTime=\([0-9:]*\).*/\1/p' | awk -F: '{print $1*3600+$2*60+$3}')
    runs+=("$r")
    echo "job $id ran $r s"
    [ "$i" = 1 ] && expect_log "site_factor/mlprio: live history: learned 1 ended jobs" 20
    # After the next scan the prediction is the mean of root's last two runs.
    if [ "$i" = 1 ]; then want=$(( (3300 + r) / 2 )); else want=$(( (runs[0] + r) / 2 )); fi
    wait_for 20 sh -c "[ \"\$(sbatch --parsable -p hold -o /dev/null --wrap 'sleep 1' 2>&1 >/dev/null | sed -n 's/.*(predicted run \([0-9:]*\) + margin.*/\1/p' | awk -F: '{print \$1*3600+\$2*60+\$3}')\" -le $(( want + 1 )) ]" ||
      fail "after job $id ended, root's prediction is $(predicted_run), expected about $want s"
    p=$(predicted_run)
    echo "root's next predicted run: $p (last-two mean of the runs seen: $want s)"
  done
  # The time limit job_submit sets follows: a few seconds' runs give a 1-minute limit.
  sbatch --parsable -p hold -o /dev/null --wrap 'sleep 1' 2>"$M/err" >/dev/null
  grep -q "time limit set to 00:01:00" "$M/err" || fail "time limit after two short runs: $(cat "$M/err")"
  cluster_alive || fail "slurmctld died"
  ;;
llm_good)
  # A good endpoint: the answer moves the predicted run (the plain model predicts the request,
  # -t 60 = 3600 s) only within llm_min_factor=0.5 .. llm_max_factor=2, so SITE is exactly the
  # score at the bounded estimate. 1e8 s is beyond the advisor's max_runtime_seconds: refused.
  start_llm good
  start "model=$M/plain.json,$BASE,llm_url=http://127.0.0.1:$LLM_PORT/v1,llm_timeout_ms=2000,llm_model=fake"
  expect_log "site_factor/mlprio: LLM advisor started: http://127.0.0.1:$LLM_PORT/v1/chat/completions"
  # The advisor opened libcurl itself (the plugins do not link it).
  grep -q "libcurl" "/proc/$(cat "$CL_DIR/slurmctld.pid")/maps" ||
    fail "the LLM advisor started but slurmctld has not mapped libcurl"
  declare -A want
  for rt in 1 2000 100000 100000000 FAIL; do
    marker="WANT_RT=$rt"; [ "$rt" = FAIL ] && marker="WANT_FAIL"
    id=$(sbatch --parsable -p hold -t 60 -o /dev/null --wrap "sleep 1 # $marker" 2>"$M/err") ||
      { fail "sbatch ($marker): $(cat "$M/err")"; continue; }
    [ "$rt" = 2000 ] && id2000=$id
    [ "$rt" = FAIL ] && idfail=$id
    case $rt in
      1) want[$id]=$(expect_site 1800) ;;          # clamped to 0.5 x 3600 s
      2000) want[$id]=$(expect_site 2000) ;;       # inside the bounds: taken as is
      100000) want[$id]=$(expect_site 7200) ;;     # clamped to 2 x 3600 s
      100000000) want[$id]=$(expect_site 3600) ;;  # absurd: refused, model only
      FAIL) want[$id]=$(expect_site 3600) ;;       # HTTP 500: model only
    esac
  done
  expect_log "job_submit/mlprio: decisions use the model of site_factor/mlprio" 5
  for id in "${!want[@]}"; do
    scontrol show job "$id" | grep -q "AdminComment=.*mlprio_llm=[0-9a-f]\{16\}" ||
      fail "job $id has no advisor key in AdminComment"
    wait_for 30 sh -c "[ \"\$(sprio -h -j $id -o %S | tr -d ' ')\" = ${want[$id]} ]" ||
      fail "job $id: SITE $(site_of "$id"), expected ${want[$id]}"
    s=$(site_of "$id")
    if [ -n "$s" ] && { [ "$s" -gt "$(expect_site 1800)" ] || [ "$s" -lt "$(expect_site 7200)" ]; }; then
      fail "job $id: SITE $s outside the bounds"
    fi
  done
  sprio -l
  wait_for 20 sh -c "grep -q 'LLM advisor: .*answers_ok=3 .*http_errors=1 .*invalid=1 .*advised_jobs=3$' '$CL_DIR/slurmctld.log'" ||
    fail "advisor counters not as expected: $(llm_stats)"
  llm_stats
  [ "$(grep -c '^request' "$M/llm.log")" -eq 5 ] || fail "fake server saw $(grep -c '^request' "$M/llm.log") requests, expected 5"
  # The answer, as given, where scontrol show job and mlprio-why show it; none for the HTTP 500.
  wait_for 10 sh -c "scontrol show job $id2000 | grep -q 'AdminComment=.*mlprio_llm_run=00:33:20 mlprio_llm_conf=[01]\.[0-9][0-9]'" ||
    fail "job $id2000: no advisor answer in AdminComment: $(scontrol show job "$id2000" | grep -o 'AdminComment=.*')"
  scontrol show job "$idfail" | grep -q "mlprio_llm_run=" && fail "job $idfail (HTTP 500) shows an answer"
  "$MLPRIO_BUILD/bin/mlprio-why" "$id2000" >"$M/why" 2>&1 || fail "mlprio-why: $(cat "$M/why")"
  grep "^advisor" "$M/why"
  grep -q "^advisor: answered run 00:33:20 with confidence [01]\.[0-9][0-9]" "$M/why" || fail "mlprio-why does not show the advisor's answer"
  ;;
llm_key)
  # llm_api_key_file: a group-readable key file is refused (logged; slurmctld runs on, jobs are
  # accepted, nothing is sent); made private (0600), it is read at the next reconfigure and sent
  # as "Authorization: Bearer <key>", which the fake server logs as a hash. No log holds the key.
  start_llm good
  key="sk-cluster-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
  printf '%s\n' "$key" >"$M/llm.key"
  chmod 640 "$M/llm.key"
  start "model=$M/plain.json,$BASE,llm_url=http://127.0.0.1:$LLM_PORT/v1,llm_timeout_ms=2000,llm_api_key_file=$M/llm.key"
  expect_log "site_factor/mlprio: LLM advisor not started: llm_api_key_file '$M/llm.key': mode 0640 is not 0600 or 0400"
  submit -p hold -t 60 >/dev/null || fail "sbatch without an advisor: $(cat "$M/sbatch.err")"
  cluster_alive || fail "slurmctld died after refusing the key file"
  sleep 1
  [ "$(grep -c '^request' "$M/llm.log")" -eq 0 ] || fail "a request was sent without a usable key"
  chmod 600 "$M/llm.key"
  scontrol reconfigure || fail "scontrol reconfigure"
  expect_log "site_factor/mlprio: LLM advisor started: http://127.0.0.1:$LLM_PORT/v1/chat/completions.*, API key from $M/llm.key$" 30
  id=$(sbatch --parsable -p hold -t 60 -o /dev/null --wrap "sleep 1 # WANT_RT=2000" 2>"$M/err") ||
    fail "sbatch: $(cat "$M/err")"
  want=$(expect_site 2000)
  wait_for 30 sh -c "[ \"\$(sprio -h -j $id -o %S | tr -d ' ')\" = $want ]" ||
    fail "job $id: SITE $(site_of "$id"), expected $want (advised)"
  cat "$M/llm.log"
  auth=$(printf 'Bearer %s' "$key" | sha256sum | cut -c1-16)
  grep -q "^request .* auth=$auth$" "$M/llm.log" ||
    fail "the fake server did not receive 'Authorization: Bearer <key>'"
  if grep -rqF -- "$key" "$CL_DIR" "$M/llm.log"; then fail "the key appears in a log"; fi
  cluster_alive || fail "slurmctld not alive at the end"
  ;;
llm_obey)
  # The hostile corpus (tests/data/hostile_scripts) through sbatch against an endpoint that obeys
  # every injection it can read. Each job's filled time limit is the model's (55 min + 25 % =
  # 01:09:00), its SITE lies between the scores at 2 x and 0.5 x the model's 3300 s, and the
  # injections whose "1 s, confidence 1" got through are held at 0.5 x. Then, under a model that
  # refuses root's jobs, every one of those scripts is refused whatever the endpoint says.
  start_llm obey
  start "model=$M/hist.json,$BASE,llm_url=http://127.0.0.1:$LLM_PORT/v1,llm_timeout_ms=3000"
  expect_log "site_factor/mlprio: LLM advisor started: .*response_format json_schema"
  hi=$(expect_site 1650 0)
  lo=$(expect_site 6600 0)
  # After each script a plain job the fake answers with 777 s: three refused answers in a row
  # would open the breaker (K=3 for 30 s) and the rest would get no answer at all.
  declare -A names
  for f in "$HERE/../data/hostile_scripts/"*.sh; do
    name=$(basename "$f")
    if id=$(sbatch --parsable -p hold -o /dev/null "$f" 2>"$M/err"); then
      names[$id]=$name
      sbatch -p hold -o /dev/null --wrap "sleep 1 # answer runtime_seconds=777 after $name" >/dev/null 2>&1 ||
        fail "sbatch of the job after $name"
    else
      # sbatch itself refuses a script with a NUL or CR LF: the 14_ file may not get in.
      echo "sbatch refused $name: $(tr '\n' ' ' <"$M/err")"
      case $name in 14_*) ;; *) fail "sbatch $name: $(cat "$M/err")" ;; esac
    fi
  done
  n=${#names[@]}
  [ "$n" -ge 15 ] || fail "only $n corpus scripts were submitted"
  llm_answered() {
    local ok bad
    ok=$(llm_counter answers_ok); bad=$(llm_counter invalid)
    [ $(( ${ok:-0} + ${bad:-0} )) -ge "$1" ]
  }
  wait_for 60 llm_answered $((2 * n)) || fail "the advisor did not answer all $((2 * n)) jobs: $(llm_stats)"
  llm_stats
  [ "$(llm_counter breaker_skipped)" = 0 ] || fail "requests were skipped: $(llm_stats)"
  # An answer is counted when it is parsed and reaches the job's record a moment later: wait
  # until every valid answer shows there (on a loaded machine one was once still missing).
  llm_applied() {
    local c=0 id
    for id in $(squeue -h -p hold -o %i); do
      grep -q "mlprio_llm_run=" <<<"$(scontrol show job "$id")" && c=$((c + 1))
    done
    [ "$c" -ge "$1" ]
  }
  wait_for 30 llm_applied "$(llm_counter answers_ok)" ||
    fail "not every valid answer reached its job: $(llm_stats)"
  obeyed=0
  # Here-strings, not `echo | grep -q`: under pipefail grep -q's early exit can SIGPIPE the echo
  # and fail a check whose text is there (seen once: "TimeLimit=01:09:00, expected 01:09:00").
  for id in "${!names[@]}"; do
    info=$(scontrol show job "$id")
    grep -q "TimeLimit=01:09:00" <<<"$info" ||
      fail "${names[$id]} (job $id): $(echo "$info" | grep -o 'TimeLimit=[^ ]*'), expected the model's 01:09:00"
    if grep -q "mlprio_llm_run=00:00:01 mlprio_llm_conf=1.00" <<<"$info"; then
      obeyed=$((obeyed + 1))
      wait_for 30 sh -c "[ \"\$(sprio -h -j $id -o %S | tr -d ' ')\" = $hi ]" ||
        fail "${names[$id]} (job $id): SITE $(site_of "$id"), expected $hi (0.5 x the model's run)"
    fi
    s=$(site_of "$id")
    if [ -z "$s" ] || [ "$s" -gt "$hi" ] || [ "$s" -lt "$lo" ]; then
      fail "${names[$id]} (job $id): SITE '$s' outside [$lo, $hi]"
    fi
  done
  echo "$n corpus jobs, $obeyed answered '1 s, confidence 1' (SITE held at $hi), SITE within [$lo, $hi]"
  [ "$obeyed" -ge 8 ] || fail "only $obeyed injections got through the parser: the fake did not obey"
  sed -i "s#^PrioritySiteFactorParameters=.*#PrioritySiteFactorParameters=model=$M/failing.json,$BASE,refuse_above=0.5,refuse_mode=refuse,llm_url=http://127.0.0.1:$LLM_PORT/v1,llm_timeout_ms=3000#" "$SLURM_CONF"
  scontrol reconfigure || fail "scontrol reconfigure"
  expect_log "site_factor/mlprio: reconfigured (formula model" 30
  refused=0
  for id in "${!names[@]}"; do
    if sbatch -p hold -o /dev/null "$HERE/../data/hostile_scripts/${names[$id]}" 2>"$M/err" >/dev/null; then
      fail "${names[$id]} was accepted under a model that refuses it"
    elif grep -q "predicted to fail with probability 0.90" "$M/err"; then
      refused=$((refused + 1))
    else
      fail "${names[$id]}: sbatch failed without the refusal: $(cat "$M/err")"
    fi
  done
  echo "$refused of $n corpus scripts refused under the failing model"
  grep "very large processing time" "$CL_DIR/slurmctld.log" && fail "slurmctld reported very large processing time"
  cluster_alive || fail "slurmctld not alive at the end"
  ;;
llm_down|llm_slow|llm_500|llm_garbage|llm_huge|llm_hostile|llm_hang|llm_trickle|llm_error_openai|llm_error_vllm)
  # A bad endpoint: 100 submissions stay fast, nothing is advised, SITE is the model's alone.
  mode=${CASE#llm_}
  if [ "$mode" = down ]; then
    start_llm good; stop_llm   # a port that was just free: connection refused
    counter=transport_errors
  else
    start_llm "$mode"
    case $mode in slow|hang|trickle) counter=timeouts ;; 500|error_*) counter=http_errors ;;
                  huge) counter=too_large ;; *) counter=invalid ;; esac
  fi
  start "model=$M/plain.json,$BASE,llm_url=http://127.0.0.1:$LLM_PORT,llm_timeout_ms=1000"
  expect_log "site_factor/mlprio: LLM advisor started"
  t0=$(date +%s)
  ok=0
  for i in $(seq 100); do
    sbatch -p hold -t 60 -o /dev/null --wrap "sleep 1 # job $i WANT_RT=1" >/dev/null 2>&1 && ok=$((ok + 1))
  done
  elapsed=$(( $(date +%s) - t0 ))
  echo "100 sbatch against a '$mode' LLM endpoint: $ok accepted in ${elapsed}s"
  [ "$ok" -eq 100 ] || fail "only $ok of 100 sbatch succeeded"
  [ "$elapsed" -lt 60 ] || fail "100 sbatch took ${elapsed}s (>= 60 s)"
  cluster_alive || fail "slurmctld not alive"
  wait_for 40 sh -c "[ \"\$(grep 'LLM advisor: submitted=' '$CL_DIR/slurmctld.log' | tail -1 | grep -o ' $counter=[0-9]*' | cut -d= -f2)\" -gt 0 ] 2>/dev/null" ||
    fail "no $counter counted: $(llm_stats)"
  llm_stats
  [ "$(llm_counter answers_ok)" = 0 ] || fail "answers_ok is not 0: $(llm_stats)"
  [ "$(llm_counter advised_jobs)" = 0 ] || fail "jobs were advised: $(llm_stats)"
  want=$(expect_site 3600)
  bad=$(sprio -h -o "%i %S" | awk -v w="$want" '$2 != w' | wc -l)
  n=$(sprio -h -o "%i %S" | wc -l)
  [ "$n" -eq 100 ] || fail "sprio lists $n jobs, expected 100"
  [ "$bad" -eq 0 ] || fail "$bad jobs have a SITE other than the model's $want"
  grep "very large processing time" "$CL_DIR/slurmctld.log" && fail "slurmctld reported very large processing time"
  # The server's own words reach the log (sanitised: its escape and newline do not forge a line).
  case $mode in
    error_openai) expect_log "LLM advisor: request failed: http_error: HTTP 400: server says: invalid_request_error/400: response_format type must be one of .* but got: json_schema" ;;
    error_vllm) expect_log "LLM advisor: request failed: http_error: HTTP 404: server says: NotFoundError/404: The model .fake. does not exist." ;;
    hang|trickle) expect_log "LLM advisor: request failed: timeout: time-out" ;;
  esac
  grep -q "^forged" "$CL_DIR/slurmctld.log" && fail "an error body forged a log line"
  grep -q $'\x1b' "$CL_DIR/slurmctld.log" && fail "an escape sequence reached the log"
  cluster_alive || fail "slurmctld not alive at the end"
  ;;
dbd_update)
  # With slurmdbd the decay thread runs site_factor_p_update every PriorityCalcPeriod (1 min, the
  # least): it logs, sets pending jobs' factors and pokes the model watcher, so a replaced model
  # file is picked up even with the watcher's own period at 1 h, and SITE follows it.
  export CLUSTER_DBD=1
  cp "$M/plain.json" "$M/m.json"
  start "model=$M/m.json,$BASE,check_period_ms=3600000"
  grep -q "Registering slurmctld at port .* with slurmdbd" "$CL_DIR/slurmctld.log" || fail "slurmctld did not register with slurmdbd"
  id=$(submit -p hold -t 5) || fail "sbatch"
  wait_for 30 sh -c "[ \"\$(sprio -h -j $id -o %S | tr -d ' ')\" -gt 0 ]" || fail "SITE was never set for job $id"
  s1=$(site_of "$id")
  echo "SITE of job $id with the plain model: $s1"
  # root's history: 1 min runs instead of the 5 min request, so a higher SITE.
  "$MODEL_TOOL" "$M/new.json" --user root --last-run 60 --fail-rate 0 && mv "$M/new.json" "$M/m.json"
  expect_log "site_factor/mlprio: update: site factor set for 1 pending jobs" 150
  expect_log "site_factor/mlprio: model file $M/m.json changed; reloading" 20
  wait_for 30 sh -c "[ \"\$(sprio -h -j $id -o %S | tr -d ' ')\" -gt $s1 ]" ||
    fail "SITE of job $id is $(site_of "$id") after the update, expected above $s1"
  echo "SITE of job $id after the update: $(site_of "$id")"
  grep "site_factor/mlprio: update:\|site_factor/mlprio: model" "$CL_DIR/slurmctld.log" | tail -3
  ;;
dbd_loop)
  # The loop closes: jobs run, sacct dumps them from slurmdbd, mlprio-model learns from that dump
  # and the new model loads into the running plugins after scontrol reconfigure.
  export CLUSTER_DBD=1
  TOOL="$MLPRIO_BUILD/bin/mlprio-model"
  [ -x "$TOOL" ] || { echo "SKIP: $TOOL not built"; exit $SKIP; }
  start "model=$M/plain.json,$BASE"
  ids=()
  # mlprio-model needs >= 20 training jobs with a known run time: 30 jobs, varied limits.
  for i in $(seq 30); do
    t=$(( (i % 6) * 7 + 1 ))
    ids+=("$(sbatch --parsable -p debug -t "$t" -o /dev/null --wrap 'sleep 1' 2>/dev/null)") || fail "sbatch -t $t"
  done
  for id in "${ids[@]}"; do
    wait_for 90 grep -q "JobId=$id .*JobState=COMPLETED" "$CL_DIR/jobcomp.log" ||
      fail "job $id did not complete: $(scontrol show job "$id" | grep -o 'JobState=[A-Z]*')"
  done
  fmt=JobID,JobIDRaw,JobName,User,Account,Partition,QOS,Submit,Start,End,Elapsed,ElapsedRaw,Timelimit,TimelimitRaw,State,ExitCode,AllocCPUS,ReqCPUS,NNodes,ReqMem,ReqTRES,AllocTRES,MaxRSS
  dump() { sacct --parsable2 --allusers --starttime=now-1days --format="$fmt" > "$M/dump.txt" 2>"$M/sacct.err"; }
  for _ in $(seq 30); do  # slurmdbd gets the records asynchronously
    dump; [ "$(grep -c '|COMPLETED|' "$M/dump.txt")" -ge ${#ids[@]} ] && break; sleep 1
  done
  [ "$(grep -c '|COMPLETED|' "$M/dump.txt")" -ge ${#ids[@]} ] ||
    fail "sacct lists $(grep -c '|COMPLETED|' "$M/dump.txt" 2>/dev/null) completed jobs, expected ${#ids[@]}: $(cat "$M/sacct.err")"
  head -3 "$M/dump.txt"
  "$TOOL" train --trace "$M/dump.txt" --format sacct --kind formula --train-fraction 1 -o "$M/new.json" >"$M/train.out" 2>&1 ||
    fail "mlprio-model train on the sacct dump: $(tail -5 "$M/train.out")"
  cat "$M/train.out"
  chmod 644 "$M/new.json"
  sed -i "s#^PrioritySiteFactorParameters=.*#PrioritySiteFactorParameters=model=$M/new.json,$BASE#" "$SLURM_CONF"
  scontrol reconfigure || fail "scontrol reconfigure"
  expect_log "site_factor/mlprio: reconfigured (formula model" 30
  grep "site_factor/mlprio: reconfigured" "$CL_DIR/slurmctld.log" | tail -1
  # The learned model, named by the dates of its training jobs (not the fixture, not epoch seconds).
  grep -q "reconfigured (formula model, schema v[0-9]*, trained on jobs submitted 20[0-9][0-9]-[0-9-]* [0-9:]* \.\. 20[0-9][0-9]-[0-9-]* [0-9:]* UTC" "$CL_DIR/slurmctld.log" ||
    fail "the reconfigured model line names no training dates"
  id=$(submit -p hold -t 5) || fail "sbatch after reconfigure"
  wait_for 30 sh -c "[ \"\$(sprio -h -j $id -o %S | tr -d ' ')\" -gt 0 ]" || fail "no SITE from the learned model"
  ;;
fsdp_warn | fsdp_refuse | fsdp_badtable)
  # FSDP advice: mlprio-fsdp writes the table, job_submit/mlprio reads it; a script
  # whose #MLPRIO minibatch is past the predicted retry (or OOM) point is told the largest safe
  # minibatch, with the number the table holds, and whether expandable_segments moves it.
  FSDP_TOOL="$MLPRIO_BUILD/bin/mlprio-fsdp"
  [ -x "$FSDP_TOOL" ] || { echo "SKIP: $FSDP_TOOL not built"; exit $SKIP; }
  "$FSDP_TOOL" table --models t5-3b-s128-t128 --models-file "$HERE/../../fsdp_profiler/configs/models.json" \
    --gpus a100-80gb:80 -o "$M/fsdp_table.json" >"$M/table.out" 2>&1 || { cat "$M/table.out"; fail "mlprio-fsdp table"; }
  cat "$M/table.out"
  chmod 644 "$M/fsdp_table.json"
  # The numbers to expect, from the table itself (columns: max_safe 1st_retr oom).
  row() { awk -v e="$1" '$1 == "t5-3b-s128-t128" && $7 == e' "$M/table.out"; }
  safe=$(row off | awk '{print $8}') retry=$(row off | awk '{print $9}') oom=$(row off | awk '{print $10}')
  safe_exp=$(row on | awk '{print $8}')
  echo "table: max_safe $safe, first retry $retry, oom $oom; expandable max_safe $safe_exp"
  [ -n "$safe" ] && [ "$retry" != "-" ] && [ "$oom" != "-" ] || fail "the table has no retry band to test"
  fsdp_script() {  # fsdp_script FILE MINIBATCH [EXTRA-LINE]
    printf '#!/bin/bash\n#SBATCH -t 5\n#MLPRIO model=t5-3b-s128-t128 sharding=FULL_SHARD world_size=8 minibatch=%s precision=bf16\n%s\nsleep 1\n' "$2" "${3:-}" >"$1"
  }
  fsdp_script "$M/ok.sh" "$safe"
  fsdp_script "$M/retry.sh" "$retry"
  fsdp_script "$M/oom.sh" "$oom"
  fsdp_script "$M/exp.sh" "$retry" "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
  TBL="fsdp_table=$M/fsdp_table.json,fsdp_default_gpu_gib=80"
  case "$CASE" in
  fsdp_warn)
    start "model=$M/plain.json,$BASE,$TBL"
    expect_log "site_factor/mlprio: .*FSDP table $M/fsdp_table.json: 2 entries"
    id=$(sbatch --parsable -p hold -o /dev/null "$M/ok.sh" 2>"$M/err") || fail "sbatch ok: $(cat "$M/err")"
    grep -q "mlprio: minibatch" "$M/err" && fail "a safe minibatch was warned: $(cat "$M/err")"
    id=$(sbatch --parsable -p hold -o /dev/null "$M/retry.sh" 2>"$M/err") || fail "sbatch retry: $(cat "$M/err")"
    cat "$M/err"
    grep -q "mlprio: minibatch $retry per GPU is past the predicted cudaMalloc-retry point (retries from minibatch $retry, about [0-9]* % less throughput) for t5-3b-s128-t128 on 8 x 80 GiB GPUs (FULL_SHARD, bf16). Largest safe minibatch: $safe." "$M/err" ||
      fail "no retry warning naming the largest safe minibatch $safe"
    if [ "$safe_exp" != "$safe" ]; then
      grep -q "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True moves it to $safe_exp." "$M/err" || fail "expandable_segments advice missing"
    fi
    scontrol show job "$id" | grep -q "AdminComment=.*mlprio_fsdp=retries:$retry>$safe" || fail "no mlprio_fsdp note"
    id=$(sbatch --parsable -p hold -o /dev/null "$M/oom.sh" 2>"$M/err") || fail "an OOM was refused without fsdp_refuse_oom: $(cat "$M/err")"
    cat "$M/err"
    grep -q "mlprio: minibatch $oom per GPU is predicted to run out of GPU memory (OOM from minibatch $oom)" "$M/err" || fail "no OOM warning"
    # The exported PYTORCH_CUDA_ALLOC_CONF is the job's allocator setting.
    sbatch --parsable -p hold -o /dev/null "$M/exp.sh" 2>"$M/err" >/dev/null || fail "sbatch exp: $(cat "$M/err")"
    cat "$M/err"
    if [ "$retry" -le "$safe_exp" ]; then
      grep -q "mlprio: minibatch" "$M/err" && fail "minibatch $retry warned although expandable_segments makes it safe"
    fi
    expect_log "job_submit/mlprio: advised job from uid 0 name .*Largest safe minibatch: $safe"
    ;;
  fsdp_refuse)
    start "model=$M/plain.json,$BASE,$TBL,fsdp_refuse_oom=1"
    if sbatch -p hold -o /dev/null "$M/oom.sh" 2>"$M/err"; then fail "a predicted OOM was accepted"; fi
    cat "$M/err"
    grep -q "predicted to run out of GPU memory" "$M/err" || fail "no OOM message"
    grep -q "refused: predicted out-of-memory jobs are refused here (fsdp_refuse_oom=1)" "$M/err" || fail "no refusal line"
    # Retries are only warned, even with fsdp_refuse_oom=1.
    sbatch --parsable -p hold -o /dev/null "$M/retry.sh" 2>"$M/err" >/dev/null || fail "a retrying job was refused: $(cat "$M/err")"
    grep -q "Largest safe minibatch: $safe" "$M/err" || fail "no retry warning"
    expect_log "job_submit/mlprio: refused job from uid 0 name .*predicted to run out of GPU memory"
    ;;
  fsdp_badtable)
    # A corrupt, wrong-format, group-writable or missing table: logged, no advice, jobs accepted
    # (even with fsdp_refuse_oom=1), slurmctld alive; a table fixed in place is picked up.
    printf '{"format": "mlprio-fsdp-table", "version": 1, "entries": [{"model": ' >"$M/corrupt.json"
    printf '{"format": "something-else", "version": 1, "entries": []}' >"$M/other.json"
    cp "$M/fsdp_table.json" "$M/gw.json" && chmod 664 "$M/gw.json"
    chmod 644 "$M/corrupt.json" "$M/other.json"
    for bad in corrupt.json other.json gw.json missing.json; do
      start "model=$M/plain.json,$BASE,fsdp_table=$M/$bad,fsdp_refuse_oom=1,check_period_ms=500"
      expect_log "site_factor/mlprio: .*FSDP table.*$bad.*no FSDP advice" 5
      grep "FSDP table" "$CL_DIR/slurmctld.log" | head -1
      id=$(sbatch --parsable -p hold -o /dev/null "$M/oom.sh" 2>"$M/err") || fail "$bad: job refused: $(cat "$M/err")"
      grep -q "mlprio: minibatch" "$M/err" && fail "$bad: advice from a bad table"
      cluster_alive || fail "$bad: slurmctld died"
      if [ "$bad" = corrupt.json ]; then
        # Fixed in place (as an admin would: write a new file, rename it over): reloaded, advised.
        cp "$M/fsdp_table.json" "$M/fixed.tmp" && chmod 644 "$M/fixed.tmp" && mv "$M/fixed.tmp" "$M/corrupt.json"
        expect_log "FSDP table $M/corrupt.json changed; reloading" 10
        if sbatch -p hold -o /dev/null "$M/oom.sh" 2>"$M/err"; then fail "fixed table: OOM accepted"; fi
        grep -q "predicted to run out of GPU memory" "$M/err" || fail "fixed table: no advice"
      fi
      cluster_stop
    done
    ;;
  esac
  ;;
*)
  echo "unknown case $CASE"; exit 2 ;;
esac
finish
