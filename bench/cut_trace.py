#!/usr/bin/env python3
"""Writes the first FRACTION of an SWF trace's jobs in submit order (stable for ties), after its
comment lines: the development splits of bench/tune_dev_splits.sh and bench/stack_quality.sh.
  usage: bench/cut_trace.py SRC.swf FRACTION DST.swf"""
import sys

src, cut, dst = sys.argv[1], float(sys.argv[2]), sys.argv[3]
head, jobs = [], []
for line in open(src):
    s = line.strip()
    if not s or s.startswith(";"):
        head.append(line)
    else:
        jobs.append((float(s.split()[1]), len(jobs), line))
jobs.sort()
with open(dst, "w") as out:
    out.writelines(head)
    out.writelines(l for _, _, l in jobs[: int(cut * len(jobs))])
