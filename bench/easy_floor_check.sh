#!/bin/sh
# easy_floor_check.sh REPLAY FLOOR TRACE: generates TRACE (20,000 Lublin jobs on 256 nodes) and
# checks that bench_easy_floor gives `mlprio-replay run`'s jobs, mean wait, mean bounded slowdown
# and longest wait (relative difference under 1e-12) under FCFS with EASY backfilling, and with
# --metrics also its p95 and p99 waits and worst user's mean bounded slowdown.
set -eu
replay=$1 floor=$2 trace=$3
"$replay" generate --model lublin --jobs 20000 --nodes 256 --seed 3 --req-time factor -q -o "$trace"
want=$("$replay" run --trace "$trace" --backfill easy --policy fcfs --json)
got=$("$floor" "$trace" --metrics)
echo "run:   $want"
echo "floor: $got"
field() { printf '%s\n' "$1" | sed 's/[,{}]/\n/g' | sed -n "s/^\"$2\"://p" | head -n 1; }
for f in jobs avg_wait avg_bsld max_wait p95_wait p99_wait max_user_bsld; do
  w=$(field "$want" "$f")
  g=$(printf '%s\n' "$got" | tr ' ' '\n' | sed -n "s/^$f=//p")
  awk -v w="$w" -v g="$g" -v f="$f" 'BEGIN {
    d = w - g; if (d < 0) d = -d; s = w < 0 ? -w : w
    if (w == "" || g == "" || d > 1e-12 * (s > 1 ? s : 1)) { print "differs: " f " run " w " floor " g; exit 1 }
  }'
done
echo "bench_easy_floor agrees with run"
