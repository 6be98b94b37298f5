#!/usr/bin/python3
"""Checks a demo output folder: files exist, the HDF5 file is an mlprio file that h5py reads,
the replay and FSDP numbers are sane, and every plot is a PNG. Exit 1 with the reasons."""
import json
import os
import sys

import h5py

out = sys.argv[1]
errors = []


def need(cond, msg):
    if not cond:
        errors.append(msg)


for f in ["workload.swf", "inspect.json", "replay.json", "fsdp.json", "demo.h5"]:
    need(os.path.exists(os.path.join(out, f)), f"missing {f}")

if not errors:
    inspect = json.load(open(os.path.join(out, "inspect.json")))
    total = inspect["jobs"]
    # The built-in workload has users (the generator's user model): the statistics are there.
    ustats = inspect.get("user_stats") or {}
    need(ustats.get("users", 0) > 1, f"inspect.json: expected user_stats with users, got {ustats}")
    need(ustats.get("pairs", 0) > 0 and 0.0 <= ustats.get("same_request_size", -1.0) <= 1.0,
         "inspect.json: user_stats lacks repeat figures")
    test_len = total - total * 7 // 10
    runs = json.load(open(os.path.join(out, "replay.json")))["runs"]
    need(len(runs) >= 4, f"expected at least 4 replay runs, got {len(runs)}")
    for r in runs:
        tag = f"{r['policy']}+{r['backfill']}"
        need(r["jobs"] == test_len, f"{tag}: {r['jobs']} jobs replayed, expected {test_len}")
        need(r["avg_bsld"] >= 1.0, f"{tag}: avg_bsld {r['avg_bsld']} < 1")
        need(r["avg_wait"] >= 0.0, f"{tag}: negative avg_wait")
        need(0.0 < r["utilization"] <= 1.0, f"{tag}: utilization {r['utilization']} outside (0, 1]")
        need(r["max_wait"] >= r["p99_wait"] >= r["p95_wait"] >= 0.0, f"{tag}: wait percentiles out of order")
        need(r["max_wait"] >= r["avg_wait"], f"{tag}: max_wait below avg_wait")
    need({"fcfs", "multifactor", "f1"} <= {r["policy"] for r in runs}, "a baseline policy is missing")
    need({"easy", "conservative"} <= {r["backfill"] for r in runs}, "EASY or conservative is missing")
    # The deployed-stack replays: the stock stack always, the mlprio stack with a trained model.
    stacks = {r["policy"]: r for r in runs if r.get("scheduler") == "slurm"}
    want = {"stock.conf", "mlprio.conf"} if os.path.exists(os.path.join(out, "model.json")) else {"stock.conf"}
    need(want <= set(stacks), f"deployed-stack runs {sorted(stacks)}, expected {sorted(want)}")
    for name, r in stacks.items():
        need(r["backfill"] == "sched/backfill" and len(r.get("slurm_conf_sha256", "")) == 64,
             f"{name}: not labelled as a sched/backfill replay with the file's checksum")
    need("easy++" in {r["policy"] for r in runs}, "the EASY++ run is missing")
    # The example external agent answers SJF's order: the same metrics as sjf under EASY.
    by = {(r["policy"], r["backfill"]): r for r in runs}
    need(("agent:sjf", "easy") in by, "the external-agent run is missing")
    if ("agent:sjf", "easy") in by and ("sjf", "easy") in by:
        a, s = by[("agent:sjf", "easy")], by[("sjf", "easy")]
        need(all(a[k] == s[k] for k in ("avg_wait", "avg_bsld", "max_wait", "utilization")),
             "the SJF agent's run differs from sjf's")
        need(a.get("agent", {}).get("failures", -1) == 0, "the SJF agent's run had failures")
    fsdp = json.load(open(os.path.join(out, "fsdp.json")))
    need(fsdp["max_safe_mbs"] >= 1, f"max_safe_mbs {fsdp['max_safe_mbs']} < 1")
    with h5py.File(os.path.join(out, "demo.h5"), "r") as h:
        need(h.attrs["format"] == "mlprio", "demo.h5 has no format=mlprio")
        need("fsdp" in h and "sweep" in h["fsdp"], "demo.h5 lacks /fsdp/sweep")
        sweeps = [k for k in h if isinstance(h[k], h5py.Group) and h[k].attrs.get("kind") in ("sweep", b"sweep")]
        need(len(sweeps) >= 1, "demo.h5 holds no replay sweep")
        for k in sweeps:  # the sweep's summary table: one row per run, all ok
            rows = h[k]["runs"][:]
            need(bool(rows["ok"].all()), f"/{k}: a sweep task failed")
            need(len(rows) >= 6, f"/{k} holds {len(rows)} runs, expected >= 6")
            need("tasks" in h[k] and len(h[k]["tasks"]) == len(rows),
                 f"/{k}/tasks: expected one per-job group per sweep row (--per-job)")
        per_run = 0
        for k in h:
            for sub in ("runs", "tasks"):  # per-run groups of `run --out` or `sweep --per-job`
                if not (isinstance(h[k], h5py.Group) and sub in h[k] and isinstance(h[k][sub], h5py.Group)):
                    continue
                for name, g in h[k][sub].items():
                    per_run += 1
                    need(g["jobs"].shape[0] == test_len, f"/{k}/{sub}/{name}/jobs has {g['jobs'].shape[0]} rows")
                    need((g["jobs"]["start"] >= g["jobs"]["submit"]).all(), f"/{k}/{sub}/{name}: a job starts before submission")
                    need(g.attrs["jobs"] == g["jobs"].shape[0], f"/{k}/{sub}/{name}: jobs attribute differs from its table")
        need(per_run >= 6, f"only {per_run} per-run groups with per-job tables")
    plots = os.path.join(out, "plots")
    for p in ["prediction_error_cdf.png", "bsld_cdf.png", "queue_length.png", "wait_by_size.png", "fsdp_retries.png", "fsdp_memory.png",
              "bsld_over_time.png", "queue_length_cdf.png"]:
        path = os.path.join(plots, p)
        ok = os.path.exists(path) and open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
        need(ok, f"plot {p} missing or not a PNG")

if errors:
    print("demo check FAILED:\n  " + "\n  ".join(errors))
    sys.exit(1)
print("demo check passed")
