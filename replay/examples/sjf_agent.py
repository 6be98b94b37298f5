#!/usr/bin/env python3
"""An example agent for `mlprio-replay run --policy external:CMD` (replay/README.md, "External
and LLM policies"). Standard library only.

It reads one JSON request per line on stdin and answers one JSON line on stdout: the queued jobs'
ids, most urgent first. Here: shortest estimate first. The queue arrives in the base order
(`--external-base`, fcfs by default), and Python's sort is stable, so ties keep that order; with
the fcfs base this is exactly `--policy sjf` (estimate, then submit time, then trace order), which
tests/replay/test_external_policy.cpp checks job by job.

    mlprio-replay run --trace T.swf --policy sjf
    mlprio-replay run --trace T.swf --policy "external:python3 replay/examples/sjf_agent.py"

Options (for trying the fall-back paths by hand):
    --key req_time   sort by the requested time instead of the estimate
    --top N          list only the first N jobs (the rest keep their base order)
"""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--key", default="estimate", choices=["estimate", "req_time", "procs"])
    ap.add_argument("--top", type=int, default=-1)
    args = ap.parse_args()
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        queue = sorted(req["queue"], key=lambda j: j[args.key])
        ids = [j["id"] for j in queue]
        if args.top >= 0:
            ids = ids[: args.top]
        sys.stdout.write(json.dumps({"order": ids}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
