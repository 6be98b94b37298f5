#!/usr/bin/env python3
"""Predicted against measured: for each ground-truth file (truth_harness.py's OUT/<name>.truth.h5)
runs `mlprio-fsdp sweep` of the same configuration on the same allocator budget, and
`mlprio-fsdp replay --snapshot` of each memory snapshot the run kept, and compares the largest
safe minibatch, the first retrying one, the first OOM, retries per step and peak reserved memory
(relative error), and the replay's retry, OOM and segment counts with PyTorch's own. Runs on
any CPU (h5py and numpy; no torch).

    truth_compare.py TRUTH.h5|DIR [...] --fsdp BUILD/bin/mlprio-fsdp --out DIR
    truth_compare.py --plan MATRIX.json --fsdp BUILD/bin/mlprio-fsdp   # GPU time, beforehand

Writes DIR/comparison.md (the table), DIR/comparison.json (everything, machine-readable) and
DIR/<name>.h5: the sweep's HDF5 file with the measured /truth group copied in, which
scripts/plot.py draws predicted and measured together. Exit 0 when every comparison ran (agreement
is reported, not judged), 1 when a sweep or replay failed, 2 on bad input."""
import argparse
import glob
import json
import math
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import h5py  # noqa: E402

import snapshot_summary  # noqa: E402
import truth_config  # noqa: E402
import truth_h5  # noqa: E402
import truth_search  # noqa: E402

COMPARISON_FORMAT = "mlprio-fsdp-truth-comparison"
COMPARISON_VERSION = 1
DEFAULT_MODELS_FILE = os.path.join(HERE, "truth_models.json")
GIB = float(1 << 30)
# memory_stats() keys the replay of a snapshot is held against.
REPLAY_KEYS = ("num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free",
               "segment.all.current", "segment.all.peak", "reserved_bytes.all.peak",
               "allocated_bytes.all.peak")


class ToolError(RuntimeError):
    """`mlprio-fsdp` failed; the message holds its command line and error output."""


def run_tool(argv):
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != 0:
        raise ToolError(f"{' '.join(argv)}: exit {p.returncode}: {p.stderr.strip()[-2000:]}")
    return json.loads(p.stdout)


def predicted_boundaries(sweep):
    """(max_safe, first_retry, first_oom) of a sweep's JSON, by the sweep's own definitions."""
    pts = sweep["points"]
    first_oom = next((p["mbs"] for p in pts if p["oom"]), 0)
    first_retry = next((p["mbs"] for p in pts if p["retries_per_step"] > 0 and not p["oom"]), 0)
    return sweep["max_safe_mbs"], first_retry, first_oom


def predicted_level(p):
    return truth_search.level_of({"oom": p["oom"], "retries_per_step": p["retries_per_step"]})


def rel_err(pred, meas):
    return (pred - meas) / meas if meas else math.nan


def throughput_cliff(measured, first_bad, by_mbs):
    """What the first retrying minibatch cost in step time: its measured step time against the
    least-squares line of step time over the safe minibatches below it (as measure's analysis
    in fsdp_profiler/README.md does), beside the allocator device time the sweep predicts there
    above the last safe size. None without a retrying point and two timed safe ones."""
    if not first_bad:
        return None
    safe = [(p["mbs"], p["step_ms"]) for p in measured
            if p["status"] == truth_search.SAFE and p["mbs"] < first_bad
            and math.isfinite(p["step_ms"])]
    bad = next((p for p in measured if p["mbs"] == first_bad), None)
    if len(safe) < 2 or bad is None or not math.isfinite(bad["step_ms"]):
        return None
    n = len(safe)
    mx = sum(x for x, _ in safe) / n
    my = sum(y for _, y in safe) / n
    sxx = sum((x - mx) ** 2 for x, _ in safe)
    slope = sum((x - mx) * (y - my) for x, y in safe) / sxx if sxx else 0.0
    expected = my + slope * (first_bad - mx)
    out = {"mbs": first_bad, "measured_step_ms": bad["step_ms"], "expected_step_ms": expected,
           "measured_loss": 1.0 - expected / bad["step_ms"] if bad["step_ms"] > 0 else None}
    last_safe = max(x for x, _ in safe)
    if first_bad in by_mbs and last_safe in by_mbs:
        out["predicted_extra_alloc_ms_per_step"] = (
            by_mbs[first_bad]["alloc_overhead_ms_per_step"]
            - by_mbs[last_safe]["alloc_overhead_ms_per_step"])
    return out


def compare_replay(fsdp, cfg, budget, truth_dir, out, mbs, snap_attrs, measured_stats,
                   tool_errors):
    """`replay` of one kept snapshot against PyTorch's memory_stats at the end of that point."""
    src = os.path.join(truth_dir, snap_attrs["file"])
    entry = {"mbs": mbs, "snapshot": snap_attrs["file"]}
    if not os.path.exists(src):
        entry["error"] = f"snapshot {snap_attrs['file']} is not beside the truth file"
        return entry
    try:
        snap = snapshot_summary.load(src)
    except snapshot_summary.SnapshotError as e:  # this replay only: the rest still compares
        entry["error"] = str(e)
        return entry
    js = os.path.join(out, f"{cfg.name}.mbs_{mbs}.replay-input.json")
    snapshot_summary.write_replay_json(snap, js)
    argv = [fsdp, "replay", "--snapshot", js, "--capacity", str(budget), "--json"]
    if cfg.alloc_conf:
        argv += ["--alloc-conf", cfg.alloc_conf]
    try:
        r = run_tool(argv)
    except ToolError as e:
        tool_errors.append(str(e))
        entry["error"] = str(e)
        return entry
    finally:
        os.remove(js)
    entry["trace"] = snapshot_summary.summarise(snap)
    entry["replayed"] = {k: r["stats"].get(k) for k in REPLAY_KEYS}
    entry["replayed"]["unmatched_frees"] = r["replay"]["unmatched_frees"]
    entry["measured"] = {k: measured_stats.get(k) for k in REPLAY_KEYS}
    return entry


def compare_one(path, fsdp, out, models_file, tool_errors):
    with h5py.File(path, "r") as f:
        truth = truth_h5.read_truth(f)
    a = truth["attrs"]
    cfg = truth_config.make_config({k: v for k, v in truth["config"].items()
                                    if k in truth_config.FIELDS}, path)
    budget = int(a["budget_bytes"]) or cfg.budget_bytes
    measured = [p for p in truth["points"] if p["status"] != truth_search.ERROR]
    levels = {p["mbs"]: p["status"] for p in truth["points"]}
    m_safe, m_retry, m_oom, exact = truth_search.boundaries(levels)
    res = {"name": cfg.name, "file": os.path.basename(path), "model": cfg.model,
           "world_size": cfg.world_size, "ranks": cfg.ranks, "alloc_conf": cfg.alloc_conf,
           "precision": cfg.precision, "activation_checkpointing": cfg.activation_checkpointing,
           "seq_len": cfg.effective_seq_len, "tgt_len": cfg.effective_tgt_len,
           "budget_bytes": budget, "steps": cfg.steps, "device": a.get("device_name", ""),
           "torch_version": a.get("torch_version", ""), "status": a.get("status", ""),
           "errors": {str(k): v for k, v in truth["errors"].items()},
           "measured": {"max_safe_mbs": m_safe, "first_retry_mbs": m_retry,
                        "first_oom_mbs": m_oom, "exact": exact, "points": len(measured)},
           "points": [], "replays": []}
    if not measured:
        res["predicted"] = None
        return res
    hi = max(p["mbs"] for p in measured)
    argv = cfg.sweep_argv(fsdp, cfg.mbs_lo, hi, budget, models_file)
    combined = os.path.join(out, f"{cfg.name}.h5")
    try:
        sweep = run_tool(argv + ["--out", combined])
    except ToolError as e:
        tool_errors.append(str(e))
        res["predicted"] = {"error": str(e)}
        return res
    with h5py.File(combined, "a") as dst, h5py.File(path, "r") as src:
        src.copy(src["truth"], dst, "truth")
        if "fsdp_layout_version" not in dst.attrs:  # a program older than the /truth layout
            dst.attrs["fsdp_layout_version"] = truth_h5.FSDP_LAYOUT_VERSION
    p_safe, p_retry, p_oom = predicted_boundaries(sweep)
    res["predicted"] = {"max_safe_mbs": p_safe, "first_retry_mbs": p_retry,
                        "first_oom_mbs": p_oom, "command": " ".join(argv[1:])}
    by_mbs = {p["mbs"]: p for p in sweep["points"]}
    for m in measured:
        p = by_mbs.get(m["mbs"])
        row = {"mbs": m["mbs"],
               "measured": {"level": truth_search.LEVEL_NAMES[m["status"]],
                            "retries_per_step": m["retries_per_step"],
                            "first_step_retries": m["first_step_retries"],
                            "peak_reserved_bytes": m["peak_reserved_bytes"],
                            "peak_allocated_bytes": m["peak_allocated_bytes"],
                            "step_ms": None if math.isnan(m["step_ms"]) else m["step_ms"]}}
        if p is not None:
            row["predicted"] = {"level": truth_search.LEVEL_NAMES[predicted_level(p)],
                                "retries_per_step": p["retries_per_step"],
                                "first_step_retries": p["first_step_retries"],
                                "peak_reserved_bytes": p["peak_reserved_bytes"],
                                "peak_allocated_bytes": p["peak_allocated_bytes"]}
            if not m["oom"] and not p["oom"]:
                row["peak_reserved_rel_err"] = rel_err(p["peak_reserved_bytes"],
                                                       m["peak_reserved_bytes"])
        res["points"].append(row)
    errs = [abs(r["peak_reserved_rel_err"]) for r in res["points"]
            if "peak_reserved_rel_err" in r]
    res["peak_reserved_abs_rel_err"] = ({"median": statistics.median(errs), "max": max(errs),
                                         "points": len(errs)} if errs else None)
    both = [r for r in res["points"] if "predicted" in r]
    # Retries per step where neither ran out of memory (an OOM step's count says little).
    no_oom = [r for r in both if "oom" not in (r["predicted"]["level"], r["measured"]["level"])]
    res["retries_per_step_abs_diff_mean"] = (
        statistics.mean(abs(r["predicted"]["retries_per_step"] - r["measured"]["retries_per_step"])
                        for r in no_oom) if no_oom else None)
    res["level_agreement"] = (sum(r["predicted"]["level"] == r["measured"]["level"]
                                  for r in both), len(both))
    res["throughput_cliff"] = throughput_cliff(
        measured, next((p["mbs"] for p in measured if p["status"] == truth_search.RETRY), 0),
        by_mbs)
    truth_dir = os.path.dirname(os.path.abspath(path))
    for mbs, attrs in sorted(truth["snapshots"].items()):
        res["replays"].append(compare_replay(fsdp, cfg, budget, truth_dir, out, mbs, attrs,
                                             truth["memory_stats"].get(mbs, {}), tool_errors))
    return res


def _pm(pred, meas):
    return f"{pred if pred else '-'} / {meas if meas else '-'}"


def _cliff(c):
    if not c or c.get("measured_loss") is None:
        return "-"
    return f"mbs {c['mbs']}: {c['measured_loss']:.1%}"


def markdown(results):
    lines = ["| configuration | GPU | max safe mbs | first retrying mbs | first OOM mbs | "
             "levels agreeing | retries/step, mean abs diff (no OOM) | peak reserved, abs rel err "
             "median (max) | replay: retries, segments at end | step time lost at first "
             "retrying mbs (measured) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        name = (f"{r['name']} ({r['model']}, {r['ranks']} {r['world_size']}, "
                f"{r['alloc_conf'] or 'default'})")
        pred = r.get("predicted")
        if not pred or "error" in pred:
            why = "no measured points" if not pred else "sweep failed"
            lines.append(f"| {name} | {r['device'] or '-'} | {why} | | | | | | | |")
            continue
        ms = r["measured"]
        exact = "" if ms["exact"] else " (bracketed)"
        lev = "{}/{}".format(*r["level_agreement"])
        rd = r["retries_per_step_abs_diff_mean"]
        pe = r["peak_reserved_abs_rel_err"]
        pe_txt = f"{pe['median']:.1%} ({pe['max']:.1%})" if pe else "-"
        reps = []
        for rp in r["replays"]:
            if "error" in rp:
                reps.append(f"mbs {rp['mbs']}: error")
                continue
            rr, mm = rp["replayed"], rp["measured"]
            reps.append(f"mbs {rp['mbs']}: {rr['num_alloc_retries']}/{mm['num_alloc_retries']}, "
                        f"{rr['segment.all.current']}/{mm['segment.all.current']}")
        lines.append(
            f"| {name} | {r['device']} | {_pm(pred['max_safe_mbs'], ms['max_safe_mbs'])}{exact} | "
            f"{_pm(pred['first_retry_mbs'], ms['first_retry_mbs'])} | "
            f"{_pm(pred['first_oom_mbs'], ms['first_oom_mbs'])} | {lev} | "
            f"{'-' if rd is None else f'{rd:.2f}'} | {pe_txt} | {'; '.join(reps) or '-'} | "
            f"{_cliff(r.get('throughput_cliff'))} |")
    lines.append("")
    lines.append("Each cell: predicted / measured ('-': none in the measured range). Replay "
                 "cells: replayed / PyTorch's count.")
    return "\n".join(lines) + "\n"


def _finite(x):
    """NaN (an undefined ratio) as null, so the JSON stays standard."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def plan(matrix, fsdp, models_file):
    """The minibatch sizes the harness would measure per configuration if PyTorch behaved as
    predicted: the search run on the sweep's answers, to size a GPU run before it starts."""
    total = 0
    for c in truth_config.load_matrix(matrix):
        sweep = run_tool(c.sweep_argv(fsdp, c.mbs_lo, c.mbs_hi, None, models_file))
        predicted = {p["mbs"]: predicted_level(p) for p in sweep["points"]}
        order = []

        def measure(mbs):
            order.append(mbs)
            return predicted[mbs]
        levels = truth_search.search(c.mbs_lo, c.mbs_hi, c.coarse_step, measure)
        b = truth_search.boundaries(levels)
        total += len(order)
        print(f"{c.name}: {len(order)} points {order}; predicted max_safe {b[0]}, first_retry "
              f"{b[1] or '-'}, first_oom {b[2] or '-'}")
    print(f"{total} points in all")


def truth_files(inputs):
    files = []
    for x in inputs:
        if os.path.isdir(x):
            files += sorted(glob.glob(os.path.join(x, "*.truth.h5")))
        else:
            files.append(x)
    return files


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inputs", nargs="*", help="*.truth.h5 files or directories holding them")
    ap.add_argument("--fsdp", required=True, help="the mlprio-fsdp program")
    ap.add_argument("--out", help="where the comparison goes")
    ap.add_argument("--models-file", default=DEFAULT_MODELS_FILE)
    ap.add_argument("--plan", metavar="MATRIX",
                    help="print the sizes the harness would measure for MATRIX if PyTorch "
                         "behaved as predicted (no truth files needed)")
    a = ap.parse_args(argv[1:])
    if a.plan:
        try:
            plan(a.plan, a.fsdp, a.models_file)
        except (OSError, truth_config.ConfigError, ToolError) as e:
            print(f"truth_compare: {e}", file=sys.stderr)
            return 2
        return 0
    if not a.out or not a.inputs:
        ap.error("give the truth files (or directories) and --out, or --plan MATRIX")
    files = truth_files(a.inputs)
    if not files:
        print(f"truth_compare: no *.truth.h5 in {' '.join(a.inputs)}", file=sys.stderr)
        return 2
    os.makedirs(a.out, exist_ok=True)
    results, tool_errors = [], []
    for path in files:
        try:
            results.append(compare_one(path, a.fsdp, a.out, a.models_file, tool_errors))
        except (OSError, KeyError, truth_h5.TruthFileError, truth_config.ConfigError,
                snapshot_summary.SnapshotError) as e:
            print(f"truth_compare: {path}: {e}", file=sys.stderr)
            return 2
    doc = _finite({"format": COMPARISON_FORMAT, "version": COMPARISON_VERSION, "configs": results,
           "tool_errors": tool_errors})
    with open(os.path.join(a.out, "comparison.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, allow_nan=False, default=str)
    md = markdown(results)
    with open(os.path.join(a.out, "comparison.md"), "w", encoding="utf-8") as f:
        f.write(md)
    sys.stdout.write(md)
    for e in tool_errors:
        print(f"truth_compare: {e}", file=sys.stderr)
    return 1 if tool_errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
