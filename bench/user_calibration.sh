#!/usr/bin/env bash
# bench/user_calibration.sh — the user-behaviour calibration table of replay/README.md ("Users"):
# `mlprio-replay inspect --user-stats` on the shared real traces with user ids (HPC2N subset,
# MetaCentrum), on the plain Lublin model, and on the generator's user model with its default
# parameters at the real traces' scale (their jobs and users) and at the demo's (6000 jobs,
# 32 users). Generated rows are the mean over SEEDS seeds (default 10) with the range in brackets
# for the figures a single trace's few heavy users move most.
#   usage: bench/user_calibration.sh [OUTDIR] [SEEDS]      (needs ../shared/data/swf)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${B:-build/release/bin}
D=../shared/data/swf
OUT=${1:-out/user_calibration}
SEEDS=${2:-10}
[ -d "$D" ] || { echo "SKIP: $D not found"; exit 0; }
mkdir -p "$OUT"

stats() {  # stats NAME TRACE: one JSON line of user_stats into $OUT/NAME.jsonl
  "$B/mlprio-replay" inspect --trace "$2" --user-stats --json 2>/dev/null |
    python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["user_stats"]))' >> "$OUT/$1.jsonl"
}
rm -f "$OUT"/*.jsonl
for t in hpc2n_subset metacentrum_wagap_2013; do stats "$t" "$D/$t.swf"; done
gen() {  # gen NAME JOBS GENERATE-OPTIONS...
  local name=$1 jobs=$2; shift 2
  for s in $(seq 1 "$SEEDS"); do
    "$B/mlprio-replay" generate --model lublin --jobs "$jobs" --nodes 256 --seed "$s" "$@" -q \
        -o "$OUT/g.swf"
    stats "$name" "$OUT/g.swf"
  done
  rm -f "$OUT/g.swf"
}
gen "lublin_batch_plain" 6000 --types batch --req-time factor
gen "lublin_both_plain" 6000 --types both --req-time factor
gen "users_3170x17" 3170 --types batch --users 17
gen "users_17900x75" 17900 --types batch --users 75
gen "users_6000x32_demo" 6000 --types batch --users 32

python3 - "$OUT" <<'PY'
import json, math, sys
out = sys.argv[1]
rows = [("hpc2n_subset (real)", "hpc2n_subset"),
        ("metacentrum_wagap_2013 (real)", "metacentrum_wagap_2013"),
        ("Lublin batch, no users (req 2x run)", "lublin_batch_plain"),
        ("Lublin both classes, no users (req 2x run)", "lublin_both_plain"),
        ("user model, 3170 jobs, 17 users", "users_3170x17"),
        ("user model, 17900 jobs, 75 users", "users_17900x75"),
        ("user model, 6000 jobs, 32 users (demo)", "users_6000x32_demo")]
cols = ["users", "top10_share", "same_request_size", "gap_within_10s", "gap_within_1h",
        "run_within_2x", "median_abs_log2_ratio", "mean_run_over_request", "run_at_limit_share",
        "short_run_share"]
ranged = {"top10_share", "same_request_size", "run_within_2x", "median_abs_log2_ratio",
          "mean_run_over_request", "short_run_share"}
print("| trace | " + " | ".join(cols) + " |")
print("|---|" + "---|" * len(cols))
for label, name in rows:
    runs = [json.loads(l) for l in open(f"{out}/{name}.jsonl")]
    cells = []
    for c in cols:
        v = [r[c] for r in runs if r[c] is not None]
        if not v:
            cells.append("-")
            continue
        m = sum(v) / len(v)
        if c == "users":
            cells.append(f"{m:.0f}")
        elif len(v) > 1 and c in ranged:
            cells.append(f"{m:.3f} ({min(v):.2f}-{max(v):.2f})")
        else:
            cells.append(f"{m:.3f}")
    print(f"| {label} | " + " | ".join(cells) + " |")
PY
