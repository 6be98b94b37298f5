#!/bin/sh
# Runs the ground-truth harness's Python checks (fsdp_profiler/validate/) for ctest:
#   truth_validate.sh unit SOURCE_DIR [MLPRIO_FSDP]  the CPU unit tests (test_truth_validate.py);
#                                                    with MLPRIO_FSDP, the comparison against it
#   truth_validate.sh harness SOURCE_DIR WORK_DIR    the harness on matrix_smoke.json: measures on
#                                                    a GPU with torch, else exit 77 (skipped)
# Exit 77 (skipped, never passed) when no python3 with h5py and numpy is found.
set -u
mode="$1" src="$2"
py=/usr/bin/python3
[ -x "$py" ] && "$py" -c "import h5py, numpy" 2> /dev/null || py=python3
"$py" -c "import h5py, numpy" 2> /dev/null ||
  { echo "skipped: the ground-truth harness needs python3 with h5py and numpy"; exit 77; }
case "$mode" in
  unit)
    cd "$src/tests/fsdp" || exit 1
    MLPRIO_FSDP="${3:-}" exec "$py" -m unittest -v test_truth_validate ;;
  harness)
    work="$3"
    rm -rf "$work" && mkdir -p "$work"
    "$py" "$src/fsdp_profiler/validate/truth_harness.py" run \
      "$src/fsdp_profiler/validate/matrix_smoke.json" --out "$work" --time-budget-s 240
    rc=$?
    [ "$rc" -ne 0 ] && exit "$rc"
    # It ran: every configuration wrote its /truth file.
    for name in tiny-w1-malloc tiny-e8-expandable; do
      [ -f "$work/$name.truth.h5" ] || { echo "no $work/$name.truth.h5"; exit 1; }
    done ;;
  *) echo "usage: truth_validate.sh unit|harness SOURCE_DIR ..."; exit 2 ;;
esac
