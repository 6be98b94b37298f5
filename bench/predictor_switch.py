#!/usr/bin/env python3
"""bench/predictor_switch.py — would choosing, per user, whichever estimate was right lately beat
the model? Reads `mlprio-model evaluate --per-job FILE` CSVs and replays, in submit order, a
per-user switch between the model's prediction, last-two and (optionally) the request: a job
takes the estimate with the lowest summed |log error| over its user's M latest jobs that had
*finished by its submit time* in the trace (the model when the user has none). Prints MAE and
within-2x of each estimate and of the switch.

    usage: bench/predictor_switch.py FILE.csv [FILE.csv ...]
"""
import collections
import csv
import math
import sys


def load(path):
    with open(path, newline="") as f:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]


def metrics(rows, key):
    mae = sum(abs(r[key] - r["run"]) for r in rows) / len(rows)
    within = sum(1 for r in rows if r["run"] > 0 and 0.5 <= r[key] / r["run"] <= 2) / len(rows)
    return mae, within


def log_error(pred, actual):
    return abs(math.log(max(pred, 1.0)) - math.log(max(actual, 1.0)))


def switch(rows, methods, m):
    finished = collections.defaultdict(list)  # user -> [(end, {method: |log error|})]
    out = []
    for r in rows:
        done = sorted((e for e in finished[r["user"]] if e[0] <= r["submit"]), key=lambda e: e[0])
        recent = done[-m:]
        choice = "model"
        if recent:
            total = {k: sum(e[1][k] for e in recent) for k in methods}
            choice = min(methods, key=lambda k: (total[k], k != "model"))
        out.append(dict(r, switch=r[choice]))
        finished[r["user"]].append((r["end"], {k: log_error(r[k], r["run"]) for k in methods}))
    return out


def main(paths):
    if not paths:
        sys.exit(__doc__)
    for path in paths:
        rows = load(path)
        print(path, len(rows), "jobs")
        for k in ("model", "last2", "request"):
            mae, within = metrics(rows, k)
            print(f"  {k:28s} MAE {mae:8.0f}  within-2x {within:.3f}")
        for methods in (("model", "last2"), ("model", "last2", "request")):
            for m in (1, 3, 5):
                mae, within = metrics(switch(rows, methods, m), "switch")
                name = "switch " + "+".join(methods) + f" M={m}"
                print(f"  {name:28s} MAE {mae:8.0f}  within-2x {within:.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
