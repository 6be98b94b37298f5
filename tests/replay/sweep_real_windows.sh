#!/bin/sh
# `mlprio-replay sweep --windows 100x1024 --seed 1` on the real hpc2n_subset trace (3170 jobs,
# 2147 windows of 1024): the plain draw gives 96 distinct starts of 100, which used to stop the sweep
# with "the sweep lists the same task twice". Now 100 distinct windows are replayed. Exit 77
# (reported as skipped by ctest) when the shared data is absent.
# Usage: sweep_real_windows.sh MLPRIO_REPLAY DATA_DIR WORK_DIR
set -eu
replay="$1" trace="$2/swf/hpc2n_subset.swf" work="$3"
if [ ! -f "$trace" ]; then
  echo "skipped: $trace is absent (real traces live in ../shared/data; set MLPRIO_DATA_DIR)"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work"
"$replay" sweep --trace "$trace" --policy fcfs --backfill easy --windows 100x1024 --seed 1 \
  --no-progress --json --out "$work/s.h5" > "$work/out.json" 2> "$work/err.txt" ||
  { cat "$work/err.txt"; exit 1; }
cat "$work/err.txt"
grep -q "^mlprio-replay sweep: 100 tasks (0 from the journal), 0 failed" "$work/err.txt"
# 100 distinct window starts in the JSON.
n=$(grep -o '"window":\[[0-9]*' "$work/out.json" | sort -u | wc -l)
[ "$n" -eq 100 ] || { echo "expected 100 distinct window starts, got $n"; exit 1; }
# More distinct windows than exist: a clear error (exit 2), not a duplicate-task message.
if "$replay" sweep --trace "$trace" --windows 3000x1024 --seed 1 --out "$work/t.h5" 2> "$work/err2.txt"; then
  echo "3000x1024 was accepted"; exit 1
fi
cat "$work/err2.txt"
grep -q "only [0-9]* distinct windows of 1024 jobs fit a trace of [0-9]* jobs" "$work/err2.txt"
rm -rf "$work"
