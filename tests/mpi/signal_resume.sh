#!/usr/bin/env bash
# SIGTERM and SIGINT to a running `mpirun ... mlprio-replay sweep` (what a user's Ctrl-C or
# Slurm's scancel/time limit sends): the sweep must stop with a non-zero exit, leave no output
# file that looks complete, and leave a journal from which the same command resumes to the same
# content as an uninterrupted run. Four deliveries: SIGTERM and SIGINT to mpirun (which passes
# them on as SIGTERM), SIGTERM to every rank at once (as srun and scancel deliver it) and SIGINT
# to rank 1 alone (a worker tells the master). "Nothing lost" means, exactly (tests/README.md):
#   - interrupted (no output file): exit status non-zero, no OUT and no OUT.tmp.* left, the
#     stop is reported ("SIGxxx: no new tasks"), and when the final line "interrupted by SIGxxx;
#     N of M results journaled" is printed, N equals the result records in OUT.journal; when the
#     ranks get the signal straight (not through mpirun, which SIGKILLs them ~1 s later) the
#     final line is required and the exit status is 128 + signo (143, 130);
#   - the rerun of the same command reuses every one of those records (its "resuming from ...:
#     J of M tasks already recorded" has J = the records counted), runs only the rest, exits 0,
#     and its --json output is byte-identical to an uninterrupted run's;
#   - a signal that comes after the output was committed (temp + rename) may leave OUT, but then
#     its /runs table equals the uninterrupted run's and no OUT.tmp.* is left.
# At least one of the two signals must interrupt the sweep, or the test fails as vacuous. The
# workload is sized for that: 288 tasks, ~5 s on 2 ranks, the signal sent once 3 results are
# journaled (Open MPI 4.1's mpirun passes SIGTERM/SIGINT on to the ranks as SIGTERM about 1 s
# after it gets it, and SIGKILLs them about 1 s later: odls_base_sigkill_timeout).
#   signal_resume.sh REPLAY MPIEXEC WORKDIR
set -uo pipefail
set -m  # job control: a job started with & keeps SIGINT (a script without it ignores SIGINT there)
REPLAY=$1 MPIEXEC=$2 WORK=$3
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$WORK" && mkdir -p "$WORK" || fail "cannot make $WORK"
"$REPLAY" generate --model lublin --types both --jobs 60000 --seed 22 --req-time factor -q \
  -o "$WORK/trace.swf" || fail "generate"
ARGS=(sweep --trace "$WORK/trace.swf" --policy fcfs,sjf,f1,multifactor --backfill easy,conservative
      --windows 36x12000 --seed 5 --json --no-progress)
MPI=("$MPIEXEC" --oversubscribe --allow-run-as-root -n 2)
start=$(date +%s)
"${MPI[@]}" "$REPLAY" "${ARGS[@]}" --out "$WORK/full.h5" >"$WORK/full.json" 2>"$WORK/full.err" \
  || fail "uninterrupted sweep: $(tail -5 "$WORK/full.err")"
tasks=$(grep -o '"policy":' "$WORK/full.json" | wc -l)
[ "$tasks" -gt 0 ] || fail "the uninterrupted run printed no runs"
echo "uninterrupted: $tasks tasks in $(( $(date +%s) - start )) s"
# The HDF5 /runs table is compared too where h5dump is installed (the first line names the file).
if command -v h5dump >/dev/null; then
  runs_table() { h5dump -d /runs "$1" | sed 1d; }
else
  echo "(no h5dump: the HDF5 /runs tables are not compared, only the --json output)"
  runs_table() { [ -s "$1" ] && echo "no h5dump"; }
fi
runs_table "$WORK/full.h5" >"$WORK/full.runs" || fail "h5dump of full.h5"

records() { local n; n=$(grep -c "^R" "$1" 2>/dev/null); echo "${n:-0}"; }

# The pid of rank $2 among mpirun $1's children.
rank_pid() {
  local p
  for p in $(pgrep -P "$1"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo "$p"; return; }
  done
}

interrupted=0
for mode in mpirun:TERM mpirun:INT all:TERM rank1:INT; do
  to=${mode%%:*} sig=${mode#*:}
  out=$WORK/$to$sig.h5
  rm -f "$out" "$out.journal"
  "${MPI[@]}" "$REPLAY" "${ARGS[@]}" --out "$out" >"$WORK/$to$sig.json" 2>"$WORK/$to$sig.err" &
  pid=$!
  # Signal once a few results are journaled (bounded wait: 120 s).
  for _ in $(seq 1200); do
    [ "$(records "$out.journal")" -ge 3 ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  case $to in
    mpirun) targets=$pid ;;
    all) targets="$(rank_pid "$pid" 0) $(rank_pid "$pid" 1)" ;;
    rank1) targets=$(rank_pid "$pid" 1) ;;
  esac
  [ -n "${targets// /}" ] || echo "$to SIG$sig: (the ranks were gone before the signal)"
  kill -"$sig" $targets 2>/dev/null
  wait "$pid"
  rc=$?
  before=$(records "$out.journal")
  echo "$to SIG$sig: exit $rc with $before of $tasks results journaled; its stderr:"
  sed 's/^/    /' "$WORK/$to$sig.err"
  compgen -G "$out.tmp.*" >/dev/null && fail "$to SIG$sig: a temporary output was left: $(ls "$out".tmp.*)"
  if [ -e "$out" ]; then
    # The signal came after the output was committed: it must be the whole result.
    runs_table "$out" | cmp -s - "$WORK/full.runs" || fail "$to SIG$sig: the output left differs"
    [ "$rc" != 0 ] || cmp -s "$WORK/full.json" "$WORK/$to$sig.json" \
      || fail "$to SIG$sig: completed run's --json differs"
    echo "$to SIG$sig: arrived after the output was written; content identical"
    continue
  fi
  [ "$rc" != 0 ] || fail "$to SIG$sig: exit 0 without an output file"
  interrupted=$((interrupted + 1))
  [ -s "$out.journal" ] || fail "$to SIG$sig: no journal left to resume from"
  grep -Eq "mlprio-replay sweep: SIG(TERM|INT)( on rank [0-9]+)?: no new tasks" "$WORK/$to$sig.err" \
    || fail "$to SIG$sig: the sweep did not report the stop"
  # mpirun SIGKILLs the ranks about 1 s after passing the signal on; when the tasks in flight
  # finished before that, the final line is there and must count the journal exactly.
  if final=$(grep -E "interrupted by SIG(TERM|INT); [0-9]+ of $tasks results journaled; run the same command again to resume" "$WORK/$to$sig.err"); then
    n=$(sed -E 's/.*; ([0-9]+) of .*/\1/' <<<"$final")
    [ "$n" = "$before" ] || fail "$to SIG$sig: the message says $n results journaled, the journal holds $before"
  else
    [ "$to" = mpirun ] || fail "$to SIG$sig: no final 'interrupted by ...' line"
    echo "$to SIG$sig: (no final line: mpirun's SIGKILL came first)"
  fi
  if [ "$to" != mpirun ]; then
    want=$((128 + $(kill -l "$sig")))
    [ "$rc" = "$want" ] || fail "$to SIG$sig: exit $rc, expected $want"
  fi
  "${MPI[@]}" "$REPLAY" "${ARGS[@]}" --out "$out" >"$WORK/res$to$sig.json" 2>"$WORK/res$to$sig.err" \
    || fail "$to SIG$sig: resume failed: $(tail -5 "$WORK/res$to$sig.err")"
  if [ "$before" -gt 0 ]; then
    grep -q "resuming from .*: $before of $tasks tasks already recorded" "$WORK/res$to$sig.err" \
      || fail "$to SIG$sig: the second run did not reuse the $before journaled results: $(cat "$WORK/res$to$sig.err")"
  fi
  cmp -s "$WORK/full.json" "$WORK/res$to$sig.json" \
    || fail "$to SIG$sig: resumed content differs from the uninterrupted run"
  runs_table "$out" | cmp -s - "$WORK/full.runs" || fail "$to SIG$sig: resumed /runs differs"
  echo "$to SIG$sig: resumed ($before results reused) to the uninterrupted content"
done
[ "$interrupted" -ge 1 ] || fail "no signal interrupted the sweep (all came after it finished): the test proved nothing"
echo "PASS ($interrupted of 4 signals interrupted the sweep)"
