#!/usr/bin/env python3
"""Periodic retraining against one frozen model, on a development split only.

    bench/retrain_dev_split.py TRACE.swf CUT BLOCKS WORK_DIR [extra mlprio-model train args]

The trace's jobs are sorted by submit time and cut to the first CUT (0.6, 0.7, 0.8: inside the
part scheduling_quality.sh trains on, never its held-out tail). On that prefix:
- frozen: one model trained on the prefix's first 80 % (`train --train-fraction 0.8`), evaluated
  on its last 20 % (`evaluate --test-fraction 0.2 --per-job`), as model/README.md's tables do;
- retrained: the last 20 % cut into BLOCKS consecutive blocks; before each block a model is
  trained on the jobs that had *finished* by the block's first submit time (submit + wait + run),
  and it predicts that block only (as a site that retrains its model every so often would).
Prints MAE (s) and within-2x of both, and of last-2 and the request, over the same jobs.
MLPRIO_BIN names the folder of mlprio-model (default build/release/bin).
"""
import csv
import math
import os
import subprocess
import sys

BIN = os.path.join(os.environ.get("MLPRIO_BIN", "build/release/bin"), "mlprio-model")


def main():
    src, cut, blocks, work = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    extra = sys.argv[5:]
    os.makedirs(work, exist_ok=True)
    head, jobs = [], []
    for line in open(src):
        s = line.strip()
        if not s or s.startswith(";"):
            head.append(line)
            continue
        jobs.append((float(s.split()[1]), len(jobs), line))
    jobs.sort(key=lambda j: (j[0], j[1]))
    prefix = jobs[: int(cut * len(jobs))]
    n_test = int(math.floor(0.2 * len(prefix)))
    first = len(prefix) - n_test

    def write(path, js):
        with open(path, "w") as out:
            out.writelines(head)
            out.writelines(j[2] for j in js)
        return path

    def train(trace, fraction, model):
        subprocess.run([BIN, "train", "--trace", trace, "--train-fraction", repr(fraction),
                        "-o", model] + extra, check=True, capture_output=True)

    def evaluate(model, trace, n_jobs, last, out_csv):
        # floor(fraction x n_jobs) == last: the evaluation's test part is exactly the last jobs.
        subprocess.run([BIN, "evaluate", "--model", model, "--trace", trace, "--test-fraction",
                        repr((last + 0.5) / n_jobs), "--per-job", out_csv],
                       check=True, capture_output=True)
        return list(csv.DictReader(open(out_csv)))

    def end(job):
        f = job[2].split()
        return float(f[1]) + max(float(f[2]), 0.0) + float(f[3])

    p = write(f"{work}/prefix.swf", prefix)
    train(p, 0.8, f"{work}/frozen.json")
    frozen = evaluate(f"{work}/frozen.json", p, len(prefix), n_test, f"{work}/frozen.csv")
    retrained = []
    bounds = [first + n_test * b // blocks for b in range(blocks + 1)]
    for b in range(blocks):
        lo, hi = bounds[b], bounds[b + 1]
        known = [j for j in prefix[:lo] if end(j) <= prefix[lo][0]]
        train(write(f"{work}/train{b}.swf", known), 1.0, f"{work}/block{b}.json")
        retrained += evaluate(f"{work}/block{b}.json", write(f"{work}/eval{b}.swf", prefix[:hi]),
                              hi, hi - lo, f"{work}/block{b}.csv")

    def stats(rows, key):
        mae = sum(abs(float(r[key]) - float(r["run"])) for r in rows) / len(rows)
        within = sum(1 for r in rows
                     if max(float(r[key]), 1) <= 2 * max(float(r["run"]), 1)
                     and max(float(r["run"]), 1) <= 2 * max(float(r[key]), 1))
        return "%.0f / %.3f" % (mae, within / len(rows))

    assert [r["id"] for r in frozen] == [r["id"] for r in retrained]
    print("| %s | %s | %d | %s | %s | %s | %s |" % (
        os.path.basename(src), cut, len(frozen), stats(frozen, "model"),
        stats(retrained, "model"), stats(frozen, "last2"), stats(frozen, "request")))


if __name__ == "__main__":
    main()
