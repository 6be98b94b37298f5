#!/usr/bin/env bash
# engine_equivalence.sh BASELINE NEW [DATA_DIR]: replays the real traces in DATA_DIR (default:
# ../shared/data beside the repository) with two mlprio-replay binaries and checks that they give
# the same results, byte for byte: for every case, the exit status, stdout (`run --json`) and stderr
# of both runs, and the /runs group of the HDF5 files they write (`--out`; h5diff, so the file's
# root attributes, the build's provenance, are left out). Meant for changes that must not change a
# schedule (a refactor of the engines, a speed-up): run it with the build before the change as
# BASELINE.
#
# The cases: every trace (and a generated deep queue) x the orders fcfs sjf f1 wfp3 unicep multifactor x backfilling none,
# easy and conservative; EASY++ (last2 estimates, tsafrir or request corrections, sjbf candidate
# order), --kill-at-limit, and the scalar and AVX2 profile scans (MLPRIO_PROFILE_SCAN) under
# conservative on every trace; the rlscheduler profile on the SWF traces with a MaxNodes line;
# --time-parallel --segments 2 and 3 on two traces; and the ml order where a model file is given
# or can be trained.
#
# Environment: JOBS (jobs per trace, the first ones: --window 0:JOBS; default 20000), MODEL (a
# mlprio-model file for the ml order), MLPRIO_MODEL (a mlprio-model binary to train one on
# hpc2n_subset when MODEL is not given), WORK (scratch folder; default a fresh temporary one,
# removed at the end unless KEEP=1), NICE (prefix for every replay; default "nice -n 19").
# Prints each differing case and a summary line; exits 1 when any case differs, 2 on bad usage.
set -uo pipefail

if [ $# -lt 2 ]; then
  echo "usage: $0 BASELINE_BIN NEW_BIN [DATA_DIR]" >&2
  exit 2
fi
base=$(realpath "$1") new=$(realpath "$2")
data=${3:-$(dirname "$(realpath "$0")")/../../shared/data}
jobs=${JOBS:-20000}
nice_cmd=${NICE:-nice -n 19}
for b in "$base" "$new"; do
  [ -x "$b" ] || { echo "$0: not an executable: $b" >&2; exit 2; }
done
[ -d "$data" ] || { echo "$0: no data folder: $data" >&2; exit 2; }
command -v h5diff >/dev/null || { echo "$0: h5diff not found (package hdf5-tools)" >&2; exit 2; }
if [ -n "${WORK:-}" ]; then
  work=$WORK
  mkdir -p "$work"
else
  work=$(mktemp -d)
  [ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT
fi

compared=0 differ=0 failed_both=0
# same NAME ARGS...: one case, run by both binaries (an environment assignment may lead ARGS).
same() {
  local name=$1
  shift
  local env=()
  while [ $# -gt 0 ] && [[ $1 == *=* && $1 != --* ]]; do
    env+=("$1")
    shift
  done
  local a=$work/a b=$work/b
  rm -f "$a".h5 "$b".h5
  env "${env[@]}" $nice_cmd "$base" run "$@" --json --out "$a".h5 >"$a".out 2>"$a".err
  local ra=$?
  env "${env[@]}" $nice_cmd "$new" run "$@" --json --out "$b".h5 >"$b".out 2>"$b".err
  local rb=$?
  # Wall-clock times (the time-parallel report's) are not results.
  local keep='s/slowest segment per round \[[^]]*\] s, total [^ ]* s/slowest segment per round [T] s, total T s/'
  sed -i -e "s|$a\.h5|OUT.h5|g" -e "$keep" "$a".err
  sed -i -e "s|$b\.h5|OUT.h5|g" -e "$keep" "$b".err
  compared=$((compared + 1))
  local why=""
  [ $ra = $rb ] || why="$why exit $ra vs $rb;"
  cmp -s "$a".out "$b".out || why="$why stdout;"
  cmp -s "$a".err "$b".err || why="$why stderr;"
  if [ -e "$a".h5 ] || [ -e "$b".h5 ]; then
    if ! [ -e "$a".h5 ] || ! [ -e "$b".h5 ]; then
      why="$why only one HDF5 file;"
    elif ! h5diff -q "$a".h5 "$b".h5 /runs /runs >/dev/null 2>&1; then
      why="$why HDF5 /runs;"
    fi
  fi
  if [ -n "$why" ]; then
    differ=$((differ + 1))
    echo "DIFFERS: $name:$why"
    echo "  args: ${env[*]} $*"
  elif [ $ra != 0 ]; then
    failed_both=$((failed_both + 1))
    echo "(both fail alike) $name: $(head -c 200 "$a".err)"
  fi
}

# The traces and the machine each needs where its file has no header.
traces=()
machine=()
add_trace() {  # a path under DATA_DIR, or an absolute one
  local path=$1
  [[ $path == /* ]] || path=$data/$1
  [ -e "$path" ] || { echo "(missing, skipped) $1"; return; }
  traces+=("$path")
  machine+=("$2")
}
add_trace swf/lublin_1.swf ""
add_trace swf/lublin_2.swf ""
add_trace swf/hpc2n_subset.swf ""
add_trace swf/NASA-iPSC-1993-3.1-cln.swf.gz ""
add_trace swf/metacentrum_wagap_2013.swf "--nodes 68 --cores-per-node 32 --allocation cores"
add_trace swf/mira.swf ""
add_trace swf/theta.swf ""
add_trace swf/LCG-2005.swf.gz ""
add_trace gpu/alibaba_v2023_openb_pod_list_default.csv \
  "--nodes 16 --cores-per-node 96 --gpus-per-node 8"
[ ${#traces[@]} -gt 0 ] || { echo "$0: none of the traces is in $data" >&2; exit 2; }
# And a deep queue (Lublin at 2.5x load on 1024 nodes, as bench/RESULTS.md's deep20k), where
# conservative backfilling's probes and moves do most of their work; BASELINE generates it.
$nice_cmd "$base" generate --model lublin --seed 1 --jobs "$jobs" --nodes 1024 --req-time factor \
  --load-scale 2.5 -q -o "$work/deep.swf" && add_trace "$work/deep.swf" ""

for k in "${!traces[@]}"; do
  path=${traces[$k]}
  t=${path#"$data/"}
  read -r -a m <<<"${machine[$k]}"
  common=(--trace "$path" "${m[@]}" --window "0:$jobs" --too-large skip)
  for p in fcfs sjf f1 wfp3 unicep multifactor; do
    for bf in none easy conservative; do
      same "$t $p $bf" "${common[@]}" --policy "$p" --backfill "$bf"
    done
  done
  for p in fcfs sjf multifactor; do
    same "$t $p easy++" "${common[@]}" --policy "$p" --backfill easy --estimate last2 \
      --correction tsafrir --backfill-order sjbf
  done
  same "$t fcfs easy request-correction" "${common[@]}" --policy fcfs --backfill easy \
    --correction request
  for bf in easy conservative; do
    same "$t fcfs $bf kill-at-limit" "${common[@]}" --policy fcfs --backfill "$bf" --kill-at-limit
  done
  for scan in scalar avx2; do
    same "$t fcfs conservative scan=$scan" MLPRIO_PROFILE_SCAN=$scan "${common[@]}" \
      --policy fcfs --backfill conservative
  done
  if [[ $t == swf/* && $t != swf/LCG* ]]; then  # (LCG has no MaxNodes line, which it needs)
    for p in fcfs sjf f1 wfp3; do
      same "$t $p rlscheduler-profile" "${common[@]}" --policy "$p" --profile rlscheduler \
        --backfill none
      same "$t $p rlscheduler-backfill" "${common[@]}" --policy "$p" --profile rlscheduler \
        --backfill rlscheduler
    done
  fi
done

# Time-parallel replay in one process (segments emulated), on two traces.
for t in swf/hpc2n_subset.swf swf/lublin_1.swf; do
  [ -e "$data/$t" ] || continue
  for segs in 2 3; do
    for pb in "fcfs easy" "multifactor conservative" "sjf none"; do
      read -r p bf <<<"$pb"
      same "$t $p $bf time-parallel x$segs" --trace "$data/$t" --window "0:$jobs" \
        --too-large skip --policy "$p" --backfill "$bf" --time-parallel --segments "$segs"
    done
  done
done

# The ml order, with a model file given or trained here.
model=${MODEL:-}
if [ -z "$model" ] && [ -n "${MLPRIO_MODEL:-}" ] && [ -e "$data/swf/hpc2n_subset.swf" ]; then
  model=$work/model.json
  $nice_cmd "$MLPRIO_MODEL" train --trace "$data/swf/hpc2n_subset.swf" -o "$model" >/dev/null 2>&1 ||
    { echo "(could not train a model; ml order skipped)"; model=""; }
fi
if [ -n "$model" ]; then
  for t in swf/hpc2n_subset.swf swf/lublin_1.swf; do
    [ -e "$data/$t" ] || continue
    for bf in none easy conservative; do
      same "$t ml $bf" --trace "$data/$t" --window "0:$jobs" --too-large skip --policy ml \
        --estimate "model:$model" --backfill "$bf"
    done
  done
else
  echo "(no model file: ml order skipped; give MODEL or MLPRIO_MODEL)"
fi

echo "engine_equivalence: $compared cases compared, $differ differ" \
  "($failed_both fail alike in both binaries)"
[ $differ = 0 ]
