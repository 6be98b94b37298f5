#!/usr/bin/python3
"""The real-slurmctld side of the deployed-stack replay check (replay_agreement.sh).

  replay_agreement.py workload N SEED CPUS OUT.json [GAP [NO_LIMIT]]
                                                        a workload: submit offsets (mean gap GAP
                                                        s, default 4), sleeps, sizes, limits
                                                        (minutes, each >= the run; a fraction
                                                        NO_LIMIT of the jobs gives none)
  replay_agreement.py train N SEED CPUS OUT.swf         a finished history of the same kind, for
                                                        training the model (user 7, not the
                                                        jobs' user: neither side starts with a
                                                        history of them)
  replay_agreement.py submit OUT.json IDS.txt           sbatch each job at its offset (real time)
  replay_agreement.py swf JOBCOMP IDS.txt CPUS OUT.swf [WORKLOAD.json]
                                                        the jobs as slurmctld ran them (its submit
                                                        times and run times) as an SWF trace; a
                                                        job that gave no limit has none in it
  replay_agreement.py compare JOBCOMP IDS.txt R.h5 OUT.json [SPRIO.txt]
                                                        per-job start differences, the rank
                                                        correlation of start order, mean wait and
                                                        bounded slowdown of each side; with the
                                                        sprio record, each job's SITE both ways
"""
import json
import math
import random
import re
import subprocess
import sys
import time
from datetime import datetime

BSLD_FLOOR = 10.0  # seconds, the replayer's default --bsld-threshold


def make_jobs(n, seed, cpus, gap=4.0, no_limit=0.0):
    rng = random.Random(seed)
    t = 0.0
    jobs = []
    sizes = [s for s in (1, 2, 4, 8, 16) if s <= cpus]
    for i in range(n):
        t += rng.expovariate(1 / gap)
        run = rng.randint(5, 60)
        size = rng.choice(sizes)
        limit_min = max(1, math.ceil(run * rng.uniform(1.0, 4.0) / 60))
        if no_limit > 0 and rng.random() < no_limit:
            limit_min = 0  # sbatch without --time: job_submit/mlprio fills it
        jobs.append({"i": i, "offset": round(t, 1), "run": run, "cpus": size, "limit_min": limit_min})
    return jobs


def workload(n, seed, cpus, out, gap=4.0, no_limit=0.0):
    with open(out, "w") as f:
        json.dump(make_jobs(n, seed, cpus, gap, no_limit), f)


def train(n, seed, cpus, out):
    """The same kind of jobs, run one after another, by user 7, as an SWF history."""
    jobs = make_jobs(n, seed, cpus)
    with open(out, "w") as f:
        f.write("; MaxNodes: 1\n; MaxProcs: %d\n" % cpus)
        for j in jobs:
            f.write("%d %d 0 %d %d -1 -1 %d %d -1 1 7 1 -1 -1 -1 -1 -1\n" % (
                j["i"] + 1, round(j["offset"]), j["run"], j["cpus"], j["cpus"], j["limit_min"] * 60))


def submit(wl, ids_out):
    jobs = json.load(open(wl))
    t0 = time.monotonic()
    with open(ids_out, "w") as ids:
        for j in jobs:
            delay = t0 + j["offset"] - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            limit = ["-t", str(j["limit_min"])] if j["limit_min"] > 0 else []
            r = subprocess.run(["sbatch", "--parsable", "-p", "debug", "-n", str(j["cpus"])] + limit +
                               ["-o", "/dev/null", "--wrap", "sleep %d" % j["run"]],
                               capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit("sbatch failed: " + r.stderr.strip())
            ids.write("%s %d\n" % (r.stdout.strip().split(";")[0], j["i"]))


def jobcomp(path):
    """JobId -> (submit, start, end, cpus, limit_min, state) from jobcomp/filetxt lines."""
    out = {}
    for line in open(path):
        kv = dict(re.findall(r"(\w+)=(\S*)", line))
        if "JobId" not in kv:
            continue
        ts = lambda k: datetime.strptime(kv[k], "%Y-%m-%dT%H:%M:%S").timestamp()
        out[kv["JobId"]] = (ts("SubmitTime"), ts("StartTime"), ts("EndTime"), int(kv["ProcCnt"]),
                            int(kv["TimeLimit"]) if kv["TimeLimit"].isdigit() else -1,
                            kv["JobState"])
    return out


def ids(path):
    return [line.split()[0] for line in open(path) if line.strip()]


def swf(jc_path, ids_path, cpus, out, wl_path=None):
    jc = jobcomp(jc_path)
    order = ids(ids_path)
    # Jobs submitted without a limit (slurmctld records the one job_submit/mlprio set).
    no_limit = set()
    if wl_path:
        wl = json.load(open(wl_path))
        index = {line.split()[0]: int(line.split()[1]) for line in open(ids_path) if line.strip()}
        no_limit = {j for j in order if wl[index[j]]["limit_min"] == 0}
    t0 = min(jc[j][0] for j in order)
    with open(out, "w") as f:
        f.write("; UnixStartTime: %d\n; MaxNodes: 1\n; MaxProcs: %d\n" % (t0, cpus))
        for j in order:
            sub, start, end, procs, lim, _ = jc[j]
            f.write("%s %d %d %d %d -1 -1 %d %d -1 1 1 -1 -1 -1 -1 -1 -1\n" % (
                j, sub - t0, start - sub, end - start, procs, procs,
                -1 if j in no_limit else lim * 60))


def spearman(a, b):
    def ranks(v):
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            k = i
            while k + 1 < len(order) and v[order[k + 1]] == v[order[i]]:
                k += 1
            for m in range(i, k + 1):
                r[order[m]] = (i + k) / 2.0
            i = k + 1
        return r
    ra, rb = ranks(a), ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = math.sqrt(sum((x - ma) ** 2 for x in ra))
    vb = math.sqrt(sum((y - mb) ** 2 for y in rb))
    return cov / (va * vb) if va > 0 and vb > 0 else 1.0


def sprio_site(path):
    """JobId -> the SITE sprio showed last while the job waited (sprio.txt: t, id, site, prio)."""
    site = {}
    for line in open(path):
        f = line.split()
        if len(f) == 4 and f[2].lstrip("-").isdigit():
            site[f[1]] = int(f[2])
    return site


def compare(jc_path, ids_path, h5_path, out, sprio_path=None):
    import h5py
    jc = jobcomp(jc_path)
    order = ids(ids_path)
    t0 = min(jc[j][0] for j in order)
    with h5py.File(h5_path, "r") as f:
        rows = f["runs/run_0000/jobs"][()]
    rep = {str(r["id"]): (r["submit"], r["start"], r["end"]) for r in rows}
    replay_killed = int(sum(int(r["killed"]) for r in rows))
    names = rows.dtype.names or ()
    rep_site = {str(r["id"]): int(r["site"]) for r in rows} if "site" in names else {}
    real_s, rep_s, diffs = [], [], []
    real_w, rep_w, real_b, rep_b = [], [], [], []
    for j in order:
        sub, start, end, _, _, _ = jc[j]
        rs, rst, ren = rep[j]
        real_s.append(start - t0)
        rep_s.append(rst)
        diffs.append(rst - (start - t0))
        run = end - start
        real_w.append(start - sub)
        rep_w.append(rst - rs)
        real_b.append(max(1.0, (start - sub + run) / max(run, BSLD_FLOOR)))
        rep_b.append(max(1.0, (rst - rs + (ren - rst)) / max(ren - rst, BSLD_FLOOR)))
    ad = sorted(abs(d) for d in diffs)
    mean = lambda v: sum(v) / len(v)
    res = {
        "jobs": len(order),
        "start_diff_mean_abs_s": mean(ad),
        "start_diff_median_abs_s": ad[len(ad) // 2],
        "start_diff_p90_abs_s": ad[min(len(ad) - 1, int(0.9 * len(ad)))],
        "start_diff_max_abs_s": ad[-1],
        "start_order_spearman": spearman(real_s, rep_s),
        "real_mean_wait_s": mean(real_w),
        "replay_mean_wait_s": mean(rep_w),
        "real_mean_bsld": mean(real_b),
        "replay_mean_bsld": mean(rep_b),
        "mean_wait_rel_diff": (mean(rep_w) - mean(real_w)) / max(mean(real_w), 1e-9),
        "mean_bsld_rel_diff": (mean(rep_b) - mean(real_b)) / mean(real_b),
        "real_killed_at_limit": sum(1 for j in order if jc[j][5] == "TIMEOUT"),
        "replay_killed_at_limit": replay_killed,
    }
    # With the plugins: each job's SITE in slurmctld (sprio) beside the replay's. A job seen by
    # sprio (it waited) and replayed is compared; equal SITE means the same prediction.
    if sprio_path and rep_site:
        real_site = sprio_site(sprio_path)
        both = [j for j in order if j in real_site and j in rep_site]
        if both:
            a = [real_site[j] for j in both]
            b = [rep_site[j] for j in both]
            res.update({
                "site_jobs_compared": len(both),
                "site_equal_fraction": sum(1 for x, y in zip(a, b) if x == y) / len(both),
                "site_mean_abs_diff": mean([abs(x - y) for x, y in zip(a, b)]),
                "site_mean_real": mean(a),
                "site_spearman": spearman(a, b),
            })
    with open(out, "w") as f:
        json.dump(res, f, indent=1)
    for k, v in res.items():
        print("%-26s %s" % (k, ("%.4g" % v) if isinstance(v, float) else v))


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "workload":
        workload(int(args[0]), int(args[1]), int(args[2]), args[3],
                 *(float(a) for a in args[4:6]))
    elif cmd == "train":
        train(int(args[0]), int(args[1]), int(args[2]), args[3])
    elif cmd == "submit":
        submit(args[0], args[1])
    elif cmd == "swf":
        swf(args[0], args[1], int(args[2]), args[3], *args[4:5])
    elif cmd == "compare":
        compare(args[0], args[1], args[2], args[3], *args[4:5])
    else:
        sys.exit(__doc__)
