#!/usr/bin/env python3
"""Simple causal run-time estimates of an SWF trace, scored on windows of its training part.

    bench/causal_estimates.py TRACE.swf [--test]

Each job's estimate uses only its user's jobs that had ended (submit + wait + run) by its submit
time, capped by its request: the request; last-2 (mean of the latest two, Tsafrir et al.); the
latest one; the median of the latest 3, 5 and 9; the latest two *similar* jobs (same request and
size), else last-2; and the `similar` anchor of the run-time model (the latest two similar jobs,
else the latest run/request ratio times this request, else last-2). Prints MAE (s) / within-2x
on four windows of the training part (jobs 40-50, 50-60, 60-70 and 70-80 % by submit time) and,
with --test, on the held-out last 20 % as well.
"""
import heapq
import statistics
import sys
from collections import defaultdict


def read(path):
    jobs = []
    for line in open(path):
        f = line.split()
        if not f or f[0].startswith(";") or len(f) < 18:
            continue
        run = float(f[3])
        if run < 0:
            continue
        sub, wait, procs = float(f[1]), max(float(f[2]), 0.0), int(f[4])
        jobs.append({"id": int(f[0]), "sub": sub, "end": sub + wait + run, "run": run,
                     "req": float(f[8]), "user": int(f[11]),
                     "procs": procs if procs > 0 else int(f[7])})
    jobs.sort(key=lambda j: (j["sub"], j["id"]))
    return jobs


def estimates(jobs):
    ended = []  # (end, index) of submitted jobs, by end
    hist = defaultdict(list)  # user -> [(run, req, procs)] in end order
    out = defaultdict(list)
    for i, j in enumerate(jobs):
        while ended and ended[0][0] <= j["sub"]:
            _, k = heapq.heappop(ended)
            e = jobs[k]
            hist[e["user"]].append((e["run"], e["req"], e["procs"]))
        h = hist[j["user"]] if j["user"] >= 0 else []
        req = j["req"] if j["req"] > 0 else None
        cap = (lambda x: min(x, req)) if req else (lambda x: x)
        fallback = req if req else 3600.0
        runs = [x[0] for x in h]
        p = {"request": fallback}
        p["last2"] = cap(sum(runs[-2:]) / len(runs[-2:])) if runs else fallback
        p["last1"] = cap(runs[-1]) if runs else fallback
        for k in (3, 5, 9):
            p["median%d" % k] = cap(statistics.median(runs[-k:])) if runs else fallback
        sim = [x[0] for x in h if x[1] == j["req"] and x[2] == j["procs"]]
        p["similar2"] = cap(sum(sim[-2:]) / len(sim[-2:])) if sim else p["last2"]
        if sim:
            p["anchor"] = p["similar2"]
        elif h and h[-1][1] > 0 and req:
            p["anchor"] = cap(h[-1][0] / h[-1][1] * req)
        else:
            p["anchor"] = p["last2"]
        for name, v in p.items():
            out[name].append(v)
        heapq.heappush(ended, (j["end"], i))
    return out


def score(jobs, est, a, b):
    mae = sum(abs(est[i] - jobs[i]["run"]) for i in range(a, b)) / (b - a)
    within = sum(1 for i in range(a, b)
                 if jobs[i]["run"] > 0 and 0.5 <= est[i] / jobs[i]["run"] <= 2) / (b - a)
    return mae, within


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    jobs = read(sys.argv[1])
    n = len(jobs)
    windows = [(int(n * lo), int(n * hi)) for lo, hi in ((0.4, 0.5), (0.5, 0.6), (0.6, 0.7),
                                                         (0.7, 0.8))]
    if "--test" in sys.argv[2:]:
        windows.append((int(n * 0.8), n))
    print("| estimate | " + " | ".join("jobs %d-%d" % w for w in windows) + " |")
    print("|---|" + "---|" * len(windows))
    for name, est in estimates(jobs).items():
        cells = ["%.0f / %.3f" % score(jobs, est, a, b) for a, b in windows]
        print("| %s | %s |" % (name, " | ".join(cells)))


if __name__ == "__main__":
    main()
