#!/bin/sh
# `mlprio-replay sweep` under mpiexec -n 2 with an external agent order (the example
# SJF agent, one agent process per task on the rank that runs it) and an llm: order whose
# endpoint is down (every pass falls back to the base order, fcfs). Every window's metrics must
# equal those of --policy sjf and --policy fcfs respectively, the per-job groups carry the agent
# counts and the mean_bsld series. Exit 77 (skipped) without python3 or h5py.
# Usage: sweep_agents.sh MLPRIO_REPLAY MPIEXEC SOURCE_DIR WORK_DIR
set -eu
replay="$1" mpiexec="$2" src="$3" work="$4"
command -v python3 > /dev/null || { echo "skipped: no python3 for the agent"; exit 77; }
py=/usr/bin/python3
[ -x "$py" ] || py=python3
"$py" -c "import h5py" 2> /dev/null || { echo "skipped: the check needs h5py"; exit 77; }
rm -rf "$work" && mkdir -p "$work" && cd "$work"
"$replay" generate --jobs 3000 --seed 3 -q -o t.swf
agent="external:python3 $src/replay/examples/sjf_agent.py"
# Port 9 (discard) on the loopback: nothing listens there, so the endpoint is down.
"$mpiexec" --oversubscribe --allow-run-as-root -n 2 "$replay" sweep --trace t.swf \
  --policy "sjf,fcfs,$agent,llm:http://127.0.0.1:9" --backfill easy,conservative \
  --windows 3x400 --seed 5 --per-job --no-progress --json --external-timeout 5 --out s.h5 \
  > out.json
"$py" - <<'PY'
import json, h5py
d = json.load(open("out.json"))
assert not d["failed"], d["failed"]
by = {}
for r in d["runs"]:
    kind = r["policy"].split(":")[0]
    by[(kind, r["backfill"], tuple(r["window"]))] = r
n = 0
for (kind, b, w), r in by.items():
    if kind in ("external", "llm"):
        ref = by[("sjf" if kind == "external" else "fcfs", b, w)]
        for k in ("avg_wait", "avg_bsld", "max_wait", "jobs"):
            assert r[k] == ref[k], (kind, b, w, k, r[k], ref[k])
        n += 1
assert n == 12, n
with h5py.File("s.h5", "r") as f:
    seen = 0
    for name, g in f["tasks"].items():
        p = g.attrs["policy"]
        p = p.decode() if isinstance(p, bytes) else p
        assert "mean_bsld" in g["series"], name
        if p.startswith("external:"):
            assert g.attrs["agent_calls"] > 0 and g.attrs["agent_failures"] == 0, name
            seen += 1
        if p.startswith("llm:"):
            assert g.attrs["agent_answers"] == 0, name
            assert g.attrs["agent_fallbacks"] == g.attrs["agent_calls"] > 0, name
            seen += 1
    assert seen == 12, seen
print("12 agent tasks equal their reference; counts and mean_bsld in the per-job groups")
PY
cd / && rm -rf "$work"
