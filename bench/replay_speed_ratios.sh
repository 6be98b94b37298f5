#!/bin/sh
# Replay speed as ratios, each measured within one run of this script: reading (`inspect`) and a
# whole FCFS+EASY replay of a 1M-job SWF against an awk pass over the same file, the bare
# FCFS+EASY loop (bench_easy_floor) with and without the engine's metrics against awk,
# conservative against EASY backfilling on a deep queue, and the rlscheduler profile's 70k/35k.
# Every command is pinned to one core (taskset -c CORE), and the commands each ratio compares are
# timed in alternating rounds (awk, inspect, run, the floor, the floor with metrics; then EASY,
# conservative; then 35k, 70k), the best of ROUNDS kept for each. A shared VM runs for seconds at
# a time slower or faster; in alternating rounds both sides of a ratio see the same spells, where
# timing one command three times and then the next put them in different ones (on a Zen 3 VM the
# same binaries gave 0.86x and 1.33x of awk in two such runs, 1.09x and 1.15x alternated).
#
#   bench/replay_speed_ratios.sh BUILD_DIR [WORK_DIR]
#
# BUILD_DIR holds bin/mlprio-replay (a release build; its bin/bench_easy_floor, where built, adds
# the floor's lines); WORK_DIR (default: a fresh temporary folder) receives the generated traces,
# about 70 MB, plus 690 MB with TEN_MILLION=1. Set ROUNDS (default 11) for the 1M-job and
# rlscheduler rounds and CONSERVATIVE_ROUNDS (default 3) for the deep-queue pair,
# CONSERVATIVE=0 to skip the 50k-job conservative replay (tens of seconds per round), CORE to pin
# another core, HW_COUNTERS=1 to add the 1M-job commands' hardware counters (cycles,
# instructions, branch misses, from BUILD_DIR's bench_hw_counters, where the machine has them).
# Prints one line per figure: name, best seconds, and each ratio with its goal.
set -eu
BUILD=${1:?usage: bench/replay_speed_ratios.sh BUILD_DIR [WORK_DIR]}
WORK=${2:-$(mktemp -d)}
CORE=${CORE:-1}
BIN="$BUILD/bin/mlprio-replay"
[ -x "$BIN" ] || { echo "replay_speed_ratios: $BIN not found" >&2; exit 2; }
mkdir -p "$WORK"

gen() {  # gen FILE ARGS...: generate once
  f=$1
  shift
  [ -s "$WORK/$f" ] || "$BIN" generate --model lublin --seed 1 "$@" -o "$WORK/$f" >/dev/null 2>&1
}
gen m1.swf --jobs 1000000 --nodes 1024 --req-time factor
gen deep50k.swf --jobs 50000 --nodes 1024 --req-time factor --load-scale 2.5
gen tl35k.swf --jobs 35000 --nodes 256 --types typeless
gen tl70k.swf --jobs 70000 --nodes 256 --types typeless

ROUNDS=${ROUNDS:-11}
CONSERVATIVE_ROUNDS=${CONSERVATIVE_ROUNDS:-3}
# time_best NAME CMD...: runs CMD once on the pinned core, output discarded, and keeps in
# us_NAME the smaller of its wall time in microseconds and us_NAME's value so far
time_best() {
  name=$1
  shift
  t0=$(date +%s%N)
  taskset -c "$CORE" "$@" >/dev/null 2>&1
  t1=$(date +%s%N)
  t=$(( (t1 - t0) / 1000 ))
  eval "prev=\${us_$name:-}"
  if [ -z "$prev" ] || [ "$t" -lt "$prev" ]; then eval "us_$name=$t"; fi
}
# report NAME: prints us_NAME in seconds and leaves that in $best
report() {
  us=
  eval "us=\$us_$1"
  best=$(awk -v us="$us" 'BEGIN { printf "%.3f", us / 1e6 }')
  echo "$1 $best s"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

# The bare FCFS+EASY loop over the same reader (bench/easy_floor.cpp), alone and with the engine's
# metric accumulator: what the replay would take with no engine beyond them.
FLOOR="$BUILD/bin/bench_easy_floor"
# each_1M F: F NAME CMD... for each of the 1M-job commands
each_1M() {
  # shellcheck disable=SC2016 # awk's own $4, not the shell's
  "$1" awk_1M awk '{s+=$4} END{print s}' "$WORK/m1.swf"
  "$1" inspect_1M "$BIN" inspect --trace "$WORK/m1.swf"
  "$1" easy_replay_1M "$BIN" run --trace "$WORK/m1.swf" --backfill easy --policy fcfs --json
  if [ -x "$FLOOR" ]; then
    "$1" easy_floor_1M "$FLOOR" "$WORK/m1.swf"
    "$1" easy_floor_metrics_1M "$FLOOR" "$WORK/m1.swf" --metrics
  fi
}
for _ in $(seq "$ROUNDS"); do each_1M time_best; done
report awk_1M
awk_t=$best
report inspect_1M
inspect_t=$best
report easy_replay_1M
replay_t=$best
echo "ratio inspect/awk $(ratio "$inspect_t" "$awk_t") (goal <= 0.35)"
echo "ratio easy_replay/awk $(ratio "$replay_t" "$awk_t") (goal <= 1)"
if [ -x "$FLOOR" ]; then
  report easy_floor_1M
  echo "ratio easy_floor/awk $(ratio "$best" "$awk_t")"
  report easy_floor_metrics_1M
  echo "ratio easy_floor_metrics/awk $(ratio "$best" "$awk_t")"
  echo "ratio easy_replay/easy_floor_metrics $(ratio "$replay_t" "$best")"
fi

deep_rounds=$ROUNDS
[ "${CONSERVATIVE:-1}" = 0 ] || deep_rounds=$CONSERVATIVE_ROUNDS
for _ in $(seq "$deep_rounds"); do
  time_best easy_deep50k "$BIN" run --trace "$WORK/deep50k.swf" --backfill easy --policy fcfs --json
  if [ "${CONSERVATIVE:-1}" != 0 ]; then
    time_best conservative_deep50k "$BIN" run --trace "$WORK/deep50k.swf" \
      --backfill conservative --policy fcfs --json
  fi
done
report easy_deep50k
easy_t=$best
if [ "${CONSERVATIVE:-1}" != 0 ]; then
  report conservative_deep50k
  echo "ratio conservative/easy $(ratio "$best" "$easy_t") (goal <= 8)"
fi

rl="--profile rlscheduler --backfill none --policy fcfs --json"
for _ in $(seq "$ROUNDS"); do
  # shellcheck disable=SC2086
  time_best rlscheduler_35k "$BIN" run --trace "$WORK/tl35k.swf" $rl
  # shellcheck disable=SC2086
  time_best rlscheduler_70k "$BIN" run --trace "$WORK/tl70k.swf" $rl
done
report rlscheduler_35k
rl35=$best
report rlscheduler_70k
echo "ratio rlscheduler 70k/35k $(ratio "$best" "$rl35") (goal <= 2.6)"

if [ "${TEN_MILLION:-0}" = 1 ]; then
  gen m10.swf --jobs 10000000 --nodes 1024 --req-time factor
  for extra in "" "--no-series"; do
    # shellcheck disable=SC2086
    /usr/bin/time -v taskset -c "$CORE" "$BIN" run --trace "$WORK/m10.swf" --backfill easy \
      --policy fcfs --json $extra 2>"$WORK/time10.txt" >/dev/null
    echo "easy_replay_10M${extra:+ $extra}: $(grep -E 'Elapsed' "$WORK/time10.txt" | sed 's/.*: //') wall," \
      "$(grep -E 'Maximum resident' "$WORK/time10.txt" | sed 's/.*: //') KB peak RSS"
  done
fi

# The 1M-job commands once more, under their hardware counters: a JSON line each (instructions
# per cycle and branch misses tell stalls from work; "unavailable" where the machine has none).
HW="$BUILD/bin/bench_hw_counters"
if [ "${HW_COUNTERS:-0}" = 1 ] && [ -x "$HW" ]; then
  hw() {
    name=$1
    shift
    echo "counters $name $(taskset -c "$CORE" "$HW" --json "$@" 2>&1 >/dev/null | tail -n 1)"
  }
  each_1M hw
fi
