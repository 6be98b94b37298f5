#!/bin/sh
# End to end on the real hpc2n_subset trace: `--policy external:CMD` with the example
# SJF agent (replay/examples/sjf_agent.py) gives `--policy sjf`'s schedule (every job's start
# and end in the HDF5 files, under easy and conservative backfilling), the run's JSON carries
# the agent's counts, and scripts/plot.py draws the bsld-over-time and queue-length CDF figures
# from the two files. Exit 77 (reported as skipped by ctest) when the shared data, python3, or
# the plot's h5py/matplotlib are absent.
# Usage: external_agent_real.sh MLPRIO_REPLAY SOURCE_DIR DATA_DIR WORK_DIR
set -eu
replay="$1" src="$2" trace="$3/swf/hpc2n_subset.swf" work="$4"
if [ ! -f "$trace" ]; then
  echo "skipped: $trace is absent (real traces live in ../shared/data; set MLPRIO_DATA_DIR)"
  exit 77
fi
command -v python3 > /dev/null || { echo "skipped: no python3 for the agent"; exit 77; }
py=/usr/bin/python3
[ -x "$py" ] || py=python3
"$py" -c "import h5py, matplotlib, numpy" 2> /dev/null ||
  { echo "skipped: plot.py needs h5py, matplotlib and numpy"; exit 77; }
rm -rf "$work" && mkdir -p "$work"
agent="external:python3 $src/replay/examples/sjf_agent.py"
for b in easy conservative; do
  "$replay" run --trace "$trace" --backfill "$b" --policy sjf --out "$work/sjf_$b.h5" --json \
    > "$work/sjf_$b.json"
  "$replay" run --trace "$trace" --backfill "$b" --policy "$agent" --out "$work/agent_$b.h5" \
    --json > "$work/agent_$b.json"
  cat "$work/agent_$b.json"; echo
  grep -q '"agent":{"points":[1-9][0-9]*,"calls":[1-9]' "$work/agent_$b.json"
  grep -q '"failures":0,' "$work/agent_$b.json"
  # Job by job: every (id, start, end) equal.
  "$py" - "$work/sjf_$b.h5" "$work/agent_$b.h5" <<'PY'
import sys, h5py, numpy as np
a = h5py.File(sys.argv[1], "r")["runs/run_0000/jobs"][:]
b = h5py.File(sys.argv[2], "r")["runs/run_0000/jobs"][:]
assert len(a) == len(b) > 3000, (len(a), len(b))
for k in ("id", "start", "end"):
    assert np.array_equal(a[k], b[k]), k
print(f"{len(a)} jobs, the same schedule")
PY
done
"$py" "$src/scripts/plot.py" "$work/sjf_easy.h5" "$work/agent_easy.h5" "$work/plots" > "$work/plots.txt"
cat "$work/plots.txt"
for f in bsld_over_time.png queue_length_cdf.png; do
  [ -s "$work/plots/$f" ] || { echo "plot.py did not draw $f"; exit 1; }
done
rm -rf "$work"
