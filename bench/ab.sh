#!/bin/bash
# bench/ab.sh N CMD_A... -- CMD_B...: times two commands alternately, N rounds, each pinned to one
# core (taskset -c ${CORE:-1}), output discarded, and prints the best wall time of each and B/A.
# Alternating spreads a shared machine's drift over both sides; the best of N drops the rounds
# another job disturbed. Used for the A/B figures in bench/RESULTS.md (a change's binary against
# its parent's, or a command against awk).
set -eu
n=${1:?usage: bench/ab.sh N CMD_A... -- CMD_B...}
shift
core=${CORE:-1}
a=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  a+=("$1")
  shift
done
[ $# -gt 1 ] || { echo "bench/ab.sh: no '--' and second command" >&2; exit 2; }
shift
b=("$@")
best_a=''
best_b=''
for _ in $(seq "$n"); do
  t0=$(date +%s%N)
  taskset -c "$core" "${a[@]}" >/dev/null 2>&1
  t1=$(date +%s%N)
  taskset -c "$core" "${b[@]}" >/dev/null 2>&1
  t2=$(date +%s%N)
  ta=$(((t1 - t0) / 1000))
  tb=$(((t2 - t1) / 1000))
  if [ -z "$best_a" ] || [ "$ta" -lt "$best_a" ]; then best_a=$ta; fi
  if [ -z "$best_b" ] || [ "$tb" -lt "$best_b" ]; then best_b=$tb; fi
done
awk -v a="$best_a" -v b="$best_b" 'BEGIN { printf "A %.1f ms  B %.1f ms  B/A %.3f\n", a / 1000, b / 1000, b / a }'
