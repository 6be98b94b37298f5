#!/usr/bin/env bash
# rank_abort.sh MPIEXEC PROGRAM — a failure on rank 1 of 2 ends the job within 60 s with a
# non-zero status and a message naming the rank and host (tests/fsdp/rank_abort_main.cpp).
set -uo pipefail
mpiexec=$1 prog=$2
args=(-np 2 --oversubscribe)
[ "$(id -u)" = 0 ] && args+=(--allow-run-as-root)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
start=$(date +%s)
timeout 60 "$mpiexec" "${args[@]}" "$prog" >"$out" 2>&1; rc=$?
cat "$out"
echo "exit status $rc after $(( $(date +%s) - start )) s"
[ "$rc" -ne 124 ] || { echo "FAIL: the job hung (killed by timeout)"; exit 1; }
[ "$rc" -ne 0 ] && [ "$rc" -ne 3 ] || { echo "FAIL: exit $rc: the job was not aborted"; exit 1; }
grep -q "mlprio-fsdp: rank 1 of 2 on $(hostname) failed: injected CUDA error on this rank; aborting every rank" "$out" ||
  { echo "FAIL: no message naming rank 1 and its host"; exit 1; }
grep -q "rank 1: collectives aborted" "$out" || { echo "FAIL: the collectives were not aborted first"; exit 1; }
grep -q "passed the barrier" "$out" && { echo "FAIL: a rank passed the barrier"; exit 1; }
echo PASS
