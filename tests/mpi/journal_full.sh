#!/usr/bin/env bash
# A full disk under a running `mpirun ... mlprio-replay sweep`: the sweep's folder is a 4 KiB
# tmpfs, so the journal fills it after about ten records. The sweep must stop with exit 1 and a
# message naming the journal and "No space left on device" (no crash, no core dump, no output
# file), keep every record written before the disk filled, and, once there is room, the same
# command resumes from them (the resume says how many) to content identical to an uninterrupted
# run. Needs root (mount); skipped (77) otherwise.
#   journal_full.sh REPLAY MPIEXEC WORKDIR
set -uo pipefail
REPLAY=$1 MPIEXEC=$2 WORK=$3
fail() { echo "FAIL: $*"; exit 1; }
[ "$(id -u)" = 0 ] || { echo "SKIP: mounting a small tmpfs needs root"; exit 77; }
mkdir -p "$WORK" || fail "cannot make $WORK"
SMALL=$WORK/small
mountpoint -q "$SMALL" && umount "$SMALL"
rm -rf "$WORK"/* && mkdir -p "$SMALL" || fail "cannot clean $WORK"
mount -t tmpfs -o size=4k tmpfs "$SMALL" || { echo "SKIP: cannot mount a tmpfs here"; exit 77; }
trap 'umount "$SMALL" 2>/dev/null' EXIT
"$REPLAY" generate --model lublin --jobs 6000 --seed 22 --req-time factor -q -o "$WORK/t.swf" ||
  fail "generate"
ARGS=(sweep --trace "$WORK/t.swf" --policy fcfs,sjf --backfill easy --windows 12x400 --seed 5
      --json --no-progress)
MPI=("$MPIEXEC" --oversubscribe --allow-run-as-root -n 2)
"${MPI[@]}" "$REPLAY" "${ARGS[@]}" --out "$WORK/full.h5" >"$WORK/full.json" 2>"$WORK/full.err" ||
  fail "uninterrupted sweep: $(tail -3 "$WORK/full.err")"

"${MPI[@]}" "$REPLAY" "${ARGS[@]}" --out "$SMALL/o.h5" >"$WORK/o.json" 2>"$WORK/o.err"
rc=$?
cat "$WORK/o.err" | head -3
[ "$rc" = 1 ] || fail "a full disk exited $rc, expected 1"
grep -q "cannot append to journal $SMALL/o.h5.journal: No space left on device" "$WORK/o.err" ||
  fail "the error does not name the journal and the cause"
grep -q "terminate called\|Aborted\|core dumped\|Segmentation" "$WORK/o.err" && fail "the sweep crashed"
[ -e "$SMALL/o.h5" ] && fail "a sweep that could not journal wrote an output file"
kept=$(grep -c "^R" "$SMALL/o.h5.journal")
# The record the disk filled in the middle of is torn (no newline): the resume rejects it.
if [ -n "$(tail -c 1 "$SMALL/o.h5.journal")" ] && tail -n 1 "$SMALL/o.h5.journal" | grep -q "^R"; then
  kept=$((kept - 1))
  echo "the last record is torn (cut by the full disk)"
fi
[ "$kept" -gt 0 ] || fail "no record was journaled before the disk filled"
echo "full disk: exit 1 with $kept whole results journaled"

mount -o remount,size=1m "$SMALL" || fail "cannot grow the tmpfs"
"${MPI[@]}" "$REPLAY" "${ARGS[@]}" --out "$SMALL/o.h5" >"$WORK/r.json" 2>"$WORK/r.err" ||
  fail "resume: $(tail -3 "$WORK/r.err")"
grep -q "($kept from the journal)" "$WORK/r.err" ||
  fail "the resume did not reuse the $kept journaled results: $(tail -2 "$WORK/r.err")"
cmp -s "$WORK/full.json" "$WORK/r.json" || fail "resumed content differs from the uninterrupted run"
echo "resumed ($kept results reused) to the uninterrupted content"
echo "PASS"
