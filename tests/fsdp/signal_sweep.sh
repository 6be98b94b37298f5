#!/usr/bin/env bash
# SIGTERM and SIGINT during `mlprio-fsdp sweep --out X.h5` (fsdp_profiler/src/cli.cpp): the
# profiler sweep keeps no journal, so "nothing lost" means here, exactly (tests/README.md):
#   - the interrupted run exits 128 + signo (143 SIGTERM, 130 SIGINT) and says "sweep interrupted
#     by SIGxxx after K minibatch sizes; nothing written" with K < the sizes of the whole sweep;
#   - it leaves neither X.h5 nor X.h5.tmp.* (nothing that could pass for a result), and a file
#     X.h5 from before is left as it was (an interrupted run never replaces it);
#   - the same command run again exits 0 with --json output and an HDF5 /sweep (points, series,
#     attributes) identical to an uninterrupted run's.
# Runs in about 15 s.   signal_sweep.sh FSDP WORKDIR
set -uo pipefail
set -m  # job control: a job started with & keeps SIGINT (a script without it ignores SIGINT there)
FSDP=$1 WORK=$2
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$WORK" && mkdir -p "$WORK" || fail "cannot make $WORK"
# 128 minibatch sizes of ~25 ms each (no OOM at this capacity): ~3 s for the whole sweep.
ARGS=(sweep --model gpt2-xl --mbs 1:128 --capacity 64TiB --steps 20 --json)
# The HDF5 /sweep group is compared too where h5dump is installed (its first line names the file).
if command -v h5dump >/dev/null; then
  dump() { h5dump -g /sweep "$1" | sed 1d; }
else
  echo "(no h5dump: the HDF5 /sweep groups are not compared, only the --json output)"
  dump() { [ -s "$1" ] && echo "no h5dump"; }
fi
"$FSDP" "${ARGS[@]}" --out "$WORK/full.h5" >"$WORK/full.json" 2>"$WORK/full.err" \
  || fail "uninterrupted sweep: $(cat "$WORK/full.err")"
total=$(grep -c '"mbs":' "$WORK/full.json")  # one per point
[ "$total" -gt 0 ] || fail "the uninterrupted run printed no points"
dump "$WORK/full.h5" >"$WORK/full.dump" || fail "h5dump of full.h5"

for sig in TERM INT; do
  out=$WORK/sig$sig.h5
  rm -f "$out"
  "$FSDP" "${ARGS[@]}" --out "$out" >"$WORK/sig$sig.json" 2>"$WORK/sig$sig.err" &
  pid=$!
  sleep 0.5
  kill -"$sig" "$pid" 2>/dev/null || fail "SIG$sig: the sweep had already ended after 0.5 s"
  wait "$pid"
  rc=$?
  echo "SIG$sig: exit $rc: $(cat "$WORK/sig$sig.err")"
  want=$((128 + $(kill -l "$sig")))
  [ "$rc" = "$want" ] || fail "SIG$sig: exit $rc, expected $want"
  k=$(sed -nE "s/.*sweep interrupted by SIG$sig after ([0-9]+) minibatch sizes; nothing written.*/\1/p" \
        "$WORK/sig$sig.err")
  [ -n "$k" ] || fail "SIG$sig: no 'interrupted' message"
  [ "$k" -lt "$total" ] || fail "SIG$sig: $k of $total sizes: the signal did not interrupt anything"
  [ -s "$WORK/sig$sig.json" ] && fail "SIG$sig: an interrupted sweep printed a result"
  [ -e "$out" ] && fail "SIG$sig: an interrupted sweep left $out"
  compgen -G "$out.tmp.*" >/dev/null && fail "SIG$sig: a temporary output was left: $(ls "$out".tmp.*)"
  "$FSDP" "${ARGS[@]}" --out "$out" >"$WORK/res$sig.json" 2>"$WORK/res$sig.err" \
    || fail "SIG$sig: the rerun failed: $(cat "$WORK/res$sig.err")"
  cmp -s "$WORK/full.json" "$WORK/res$sig.json" || fail "SIG$sig: the rerun's --json differs"
  dump "$out" | cmp -s - "$WORK/full.dump" || fail "SIG$sig: the rerun's /sweep differs"
  echo "SIG$sig: stopped after $k of $total sizes, nothing left; the rerun gave the whole result"
done

# An interrupted run over an existing result leaves that file untouched.
cp "$WORK/full.h5" "$WORK/keep.h5"
"$FSDP" "${ARGS[@]}" --out "$WORK/keep.h5" >/dev/null 2>&1 &
pid=$!
sleep 0.5
kill -TERM "$pid" 2>/dev/null || fail "the sweep over keep.h5 had already ended"
wait "$pid"
[ $? = 143 ] || fail "the sweep over keep.h5 was not interrupted"
cmp -s "$WORK/full.h5" "$WORK/keep.h5" || fail "an interrupted run changed the existing keep.h5"
compgen -G "$WORK/keep.h5.tmp.*" >/dev/null && fail "a temporary keep.h5.tmp.* was left"
echo PASS
