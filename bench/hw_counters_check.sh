#!/bin/sh
# hw_counters_check.sh TOOL: bench_hw_counters passes the command's exit status through (3, 127
# for a command that does not exist, 128 + 9 for one killed by SIGKILL), leaves its output alone,
# and prints either every counter with a positive instruction count or "counters unavailable".
set -u
tool=$1
fail() { echo "hw_counters_check: $*"; exit 1; }
errors=$(mktemp)
out=$("$tool" sh -c 'echo hello; exit 3' 2>"$errors")
rc=$?
err=$(cat "$errors")
rm -f "$errors"
echo "$err"
[ "$rc" = 3 ] || fail "exit status $rc, expected 3"
[ "$out" = hello ] || fail "the command's output became '$out'"
if printf '%s\n' "$err" | grep -q 'counters unavailable here'; then
  echo "no hardware counters on this machine (the message says so)"
else
  n=$(printf '%s\n' "$err" | sed -n 's/^instructions  *//p')
  if [ -z "$n" ] || [ "$n" -le 0 ]; then fail "no instruction count and no 'unavailable' message"; fi
  for c in cycles branches branch_misses ipc; do
    printf '%s\n' "$err" | grep -q "^$c " || fail "no $c line"
  done
fi
"$tool" /nonexistent/command 2>/dev/null; rc=$?
[ "$rc" = 127 ] || fail "a missing command gave $rc, expected 127"
"$tool" sh -c 'kill -9 $$' 2>/dev/null; rc=$?
[ "$rc" = 137 ] || fail "a command killed by SIGKILL gave $rc, expected 137"
j=$("$tool" --json true 2>&1 >/dev/null | tail -n 1)
printf '%s\n' "$j" | grep -q '^{"exit": 0' || fail "--json printed '$j'"
"$tool" >/dev/null 2>&1; rc=$?
[ "$rc" = 2 ] || fail "no command gave $rc, expected the usage status 2"
echo "bench_hw_counters ok"
