#!/usr/bin/python3
"""Draws the standard mlprio plots from HDF5 files (a demo file, or any replay/fsdp file).

Usage: scripts/plot.py FILE.h5 [FILE.h5 ...] OUTDIR

Reads whatever groups are present and skips the rest. Replay runs from several files are drawn
together (for a set of runs: one `mlprio-replay run` per policy, say), labelled with the file
name when there is more than one:
  replay runs  (/runs/run_NNNN, /replay/runs/run_NNNN, or a `sweep --per-job` file's
               /tasks/task_NNNN): bounded-slowdown CDF, queue length
               over time and its time-weighted CDF, mean wait by job size, and the seed
               experiment's two figures: the mean bounded slowdown over time (series/mean_bsld,
               bsld_over_time.png) and the time-weighted queue-length CDF (queue_length_cdf.png);
  model eval   (/model/errors/<method>): CDF of relative prediction error per method;
  fsdp sweep   (/sweep or /fsdp/sweep): retries per step and peak memory per minibatch, and
               memory over time for the recorded minibatches;
  fsdp truth   (/truth, what PyTorch measured; fsdp_profiler/validate/): retries per step and
               peak reserved memory per minibatch, measured against the /sweep prediction of the
               same file when there is one (fsdp_truth_<configuration>.png).
Uses Debian's python3-h5py and python3-matplotlib (run with /usr/bin/python3).
"""
import os
import sys

import h5py
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

GIB = float(1 << 30)


def find(f, *paths):
    for p in paths:
        if p in f:
            return f[p]
    return None


LABEL_PREFIX = {}  # run group name -> file label, when several files are drawn together


def label_of(run):
    a = run.attrs
    def s(k):
        v = a.get(k, "")
        return v.decode() if isinstance(v, bytes) else str(v)
    policy = s("policy")
    if len(policy) > 40:  # external:CMD carries a whole command line
        policy = policy[:37] + "..."
    prefix = LABEL_PREFIX.get(run.name + "@" + run.file.filename, "")
    if s("scheduler") == "slurm":  # a deployed-stack replay: what slurmctld with that file does
        return prefix + f"deployed: {policy}"
    return prefix + f"{policy}+{s('backfill')}"


def time_weighted_cdf(t, q):
    """Each sample holds until the next; returns (sorted values, cumulative time fraction)."""
    dt = np.diff(np.append(t, t[-1]))
    order = np.argsort(q, kind="stable")
    w = np.cumsum(dt[order])
    if w.size == 0 or w[-1] <= 0:
        return None, None
    return q[order], w / w[-1]


def save(fig, out, name, written):
    p = os.path.join(out, name)
    fig.tight_layout()
    fig.savefig(p, dpi=110)
    plt.close(fig)
    written.append(p)


def plot_seed_figures(runs, names, out, written):
    """Mean bounded slowdown over time, and the queue-length CDF, one curve per run."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    drawn = 0
    for n in names:
        if "series" not in runs[n] or "mean_bsld" not in runs[n]["series"]:
            continue
        s = runs[n]["series"]
        t = np.asarray(s["time"], dtype=float)
        b = np.asarray(s["mean_bsld"], dtype=float)
        if t.size == 0:
            continue
        ax.step((t - t[0]) / 3600.0, b, where="post", label=label_of(runs[n]), linewidth=0.9)
        drawn += 1
    if drawn:
        ax.set_xlabel("hours since first submit")
        ax.set_ylabel("mean bounded slowdown of finished jobs")
        ax.set_title("Mean bounded slowdown over time")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        save(fig, out, "bsld_over_time.png", written)
    else:
        plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    drawn = 0
    for n in names:
        if "series" not in runs[n]:
            continue
        s = runs[n]["series"]
        t = np.asarray(s["time"], dtype=float)
        q = np.asarray(s["queue_length"], dtype=float)
        if t.size == 0:
            continue
        x, y = time_weighted_cdf(t, q)
        if x is None:
            continue
        ax.step(x, y, where="post", label=label_of(runs[n]))
        drawn += 1
    if drawn:
        ax.set_xlabel("jobs waiting")
        ax.set_ylabel("fraction of time")
        ax.set_title("Queue length CDF (time-weighted)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        save(fig, out, "queue_length_cdf.png", written)
    else:
        plt.close(fig)


def cdf(ax, values, label):
    v = np.sort(np.asarray(values, dtype=float))
    if v.size == 0:
        return
    ax.plot(v, np.arange(1, v.size + 1) / v.size, label=label)


def plot_replay(runs, out):
    written = []
    names = sorted(runs.keys())
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for n in names:
        cdf(ax, runs[n]["jobs"]["bsld"], label_of(runs[n]))
    ax.set_xscale("log")
    ax.set_xlabel("bounded slowdown (10 s)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title("Bounded slowdown CDF")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    p = os.path.join(out, "bsld_cdf.png"); fig.tight_layout(); fig.savefig(p, dpi=110); plt.close(fig); written.append(p)

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.5))
    for n in names:
        if "series" not in runs[n]:
            continue
        s = runs[n]["series"]
        t = np.asarray(s["time"], dtype=float)
        q = np.asarray(s["queue_length"], dtype=float)
        if t.size == 0:
            continue
        ax1.step((t - t[0]) / 3600.0, q, where="post", label=label_of(runs[n]), linewidth=0.8)
        # Time-weighted CDF: each sample holds until the next.
        dt = np.diff(np.append(t, t[-1]))
        order = np.argsort(q)
        w = np.cumsum(dt[order])
        if w[-1] > 0:
            ax2.plot(q[order], w / w[-1], label=label_of(runs[n]))
    ax1.set_xlabel("hours since first submit"); ax1.set_ylabel("jobs waiting"); ax1.set_title("Queue length over time")
    ax2.set_xlabel("jobs waiting"); ax2.set_ylabel("fraction of time"); ax2.set_title("Queue length CDF (time-weighted)")
    for a in (ax1, ax2):
        a.grid(alpha=0.3); a.legend(fontsize=7)
    p = os.path.join(out, "queue_length.png"); fig.tight_layout(); fig.savefig(p, dpi=110); plt.close(fig); written.append(p)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    width = 0.8 / max(1, len(names))
    for i, n in enumerate(names):
        j = runs[n]["jobs"]
        procs = np.maximum(1, np.asarray(j["procs"], dtype=float))
        bucket = np.floor(np.log2(procs)).astype(int)
        waits = np.asarray(j["wait"], dtype=float)
        bs = np.arange(bucket.max() + 1) if bucket.size else np.arange(1)
        means = [waits[bucket == b].mean() / 3600.0 if np.any(bucket == b) else 0 for b in bs]
        ax.bar(bs + i * width, means, width=width, label=label_of(runs[n]))
    ax.set_xlabel("job size bucket: log2(processors)")
    ax.set_ylabel("mean wait (hours)")
    ax.set_title("Wait by job size")
    ax.legend(fontsize=7); ax.grid(alpha=0.3, axis="y")
    p = os.path.join(out, "wait_by_size.png"); fig.tight_layout(); fig.savefig(p, dpi=110); plt.close(fig); written.append(p)
    plot_seed_figures(runs, names, out, written)
    return written


def plot_model(errors, out):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name in sorted(errors.keys()):
        cdf(ax, np.abs(np.asarray(errors[name], dtype=float)), name)
    ax.set_xscale("log")
    ax.set_xlabel("|predicted - actual| / actual")
    ax.set_ylabel("fraction of jobs")
    ax.set_title("Run-time prediction error CDF")
    ax.legend(); ax.grid(alpha=0.3)
    p = os.path.join(out, "prediction_error_cdf.png"); fig.tight_layout(); fig.savefig(p, dpi=110); plt.close(fig)
    return [p]


def plot_fsdp(sweep, out):
    written = []
    pts = sweep["points"][:]
    mbs = pts["mbs"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.5))
    ax1.plot(mbs, pts["retries_per_step"], marker="o")
    oom = pts["oom"].astype(bool)
    if oom.any():
        ax1.plot(mbs[oom], pts["retries_per_step"][oom], "rx", markersize=10, label="OOM")
        ax1.legend()
    safe = sweep.attrs.get("max_safe_mbs", None)
    if safe is not None and safe > 0:
        ax1.axvline(safe, color="green", linestyle="--", linewidth=1)
        ax2.axvline(safe, color="green", linestyle="--", linewidth=1, label=f"max safe mbs = {safe}")
    ax1.set_xlabel("minibatch"); ax1.set_ylabel("cudaMalloc retries per step"); ax1.set_title("Retries per minibatch")
    for key, lab in (("peak_reserved_bytes", "peak reserved"), ("peak_allocated_bytes", "peak allocated")):
        if key in pts.dtype.names:
            ax2.plot(mbs, pts[key] / GIB, marker=".", label=lab)
    ax2.set_xlabel("minibatch"); ax2.set_ylabel("GiB"); ax2.set_title("Peak memory per minibatch"); ax2.legend()
    for a in (ax1, ax2):
        a.grid(alpha=0.3)
    p = os.path.join(out, "fsdp_retries.png"); fig.tight_layout(); fig.savefig(p, dpi=110); plt.close(fig); written.append(p)
    if "series" in sweep:
        fig, ax = plt.subplots(figsize=(9, 4.5))
        for name in sorted(sweep["series"].keys()):
            s = sweep["series"][name]
            ax.plot(np.asarray(s["reserved_bytes"]) / GIB, label=f"{name} reserved", linewidth=0.8)
            ax.plot(np.asarray(s["allocated_bytes"]) / GIB, label=f"{name} allocated", linewidth=0.8)
        ax.set_xlabel("allocator event"); ax.set_ylabel("GiB"); ax.set_title("GPU memory over time (simulated)")
        ax.legend(fontsize=8); ax.grid(alpha=0.3)
        p = os.path.join(out, "fsdp_memory.png"); fig.tight_layout(); fig.savefig(p, dpi=110); plt.close(fig); written.append(p)
    return written


def plot_truth(truth, sweep, out):
    """Measured points (markers) over the predicted curve: retries per step and peak reserved."""
    pts = truth["points"][:]
    mbs = pts["mbs"]
    ok = pts["status"] != 3  # 3: the point failed for another reason than memory
    oom = (pts["oom"] == 1) & ok
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.5))
    if sweep is not None and "points" in sweep:
        pred = sweep["points"][:]
        lo, hi = mbs.min() if mbs.size else 0, mbs.max() if mbs.size else 0
        sel = (pred["mbs"] >= lo) & (pred["mbs"] <= hi)
        pm = pred["mbs"][sel]
        ax1.plot(pm, pred["retries_per_step"][sel], "-", color="tab:blue", label="predicted")
        ax2.plot(pm, pred["peak_reserved_bytes"][sel] / GIB, "-", color="tab:blue", label="predicted")
        poom = pred["oom"][sel].astype(bool)
        if poom.any():
            ax1.plot(pm[poom], pred["retries_per_step"][sel][poom], "x", color="tab:blue",
                     markersize=9, label="predicted OOM")
        safe = sweep.attrs.get("max_safe_mbs", 0)
        if safe:
            ax1.axvline(safe, color="tab:blue", linestyle="--", linewidth=1)
    ax1.plot(mbs[ok & ~oom], pts["retries_per_step"][ok & ~oom], "o", color="tab:orange",
             label="measured")
    ax2.plot(mbs[ok & ~oom], pts["peak_reserved_bytes"][ok & ~oom] / GIB, "o", color="tab:orange",
             label="measured")
    if oom.any():
        ax1.plot(mbs[oom], pts["retries_per_step"][oom], "s", color="tab:red", markersize=8,
                 fillstyle="none", label="measured OOM")
    safe = truth.attrs.get("max_safe_mbs", 0)
    if safe:
        ax1.axvline(safe, color="tab:orange", linestyle=":", linewidth=1)
    name = truth.attrs.get("name", "")
    name = name.decode() if isinstance(name, bytes) else name
    dev = truth.attrs.get("device_name", "")
    dev = dev.decode() if isinstance(dev, bytes) else dev
    ax1.set_xlabel("minibatch"); ax1.set_ylabel("cudaMalloc retries per step")
    ax1.set_title(f"{name}: retries, predicted vs PyTorch")
    ax2.set_xlabel("minibatch"); ax2.set_ylabel("GiB"); ax2.set_title(f"Peak reserved ({dev or 'GPU'})")
    budget = truth.attrs.get("budget_bytes", 0)
    if budget:
        ax2.axhline(budget / GIB, color="grey", linewidth=0.8, label="allocator budget")
    for a in (ax1, ax2):
        a.grid(alpha=0.3); a.legend(fontsize=8)
    p = os.path.join(out, f"fsdp_truth_{name}.png" if name else "fsdp_truth.png"); fig.tight_layout(); fig.savefig(p, dpi=110); plt.close(fig)
    return [p]


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    paths, out = argv[1:-1], argv[-1]
    os.makedirs(out, exist_ok=True)
    written = []
    files = []
    try:
        for path in paths:
            try:
                f = h5py.File(path, "r")
            except OSError as e:
                sys.stderr.write(f"plot.py: cannot read {path}: {e}\n")
                return 2
            files.append(f)
            if f.attrs.get("format") not in ("mlprio", b"mlprio"):
                sys.stderr.write(f"plot.py: {path} is not an mlprio result file\n")
                return 2
        # Runs may sit at the root (a replay file) or under any part of a merged file.
        runs = {}
        for i, (path, f) in enumerate(zip(paths, files)):
            tag = f"{i}:" if len(files) > 1 else ""
            for prefix in [""] + [k + "/" for k in f.keys() if isinstance(f[k], h5py.Group)]:
                # A sweep stores /runs as one summary table (skipped here) and, with --per-job,
                # per-run groups under /tasks.
                for sub in ("runs", "tasks"):
                    if prefix + sub in f and isinstance(f[prefix + sub], h5py.Group):
                        for name, g in f[prefix + sub].items():
                            if "jobs" in g:
                                runs[tag + prefix + name] = g
                                if len(files) > 1:
                                    stem = os.path.splitext(os.path.basename(path))[0]
                                    LABEL_PREFIX[g.name + "@" + f.filename] = stem + ": "
        if runs:
            written += plot_replay(runs, out)
        for f in files:
            errors = find(f, "model/errors")
            if errors is not None and len(errors) > 0:
                written += plot_model(errors, out)
            sweep = find(f, "sweep", "fsdp/sweep")
            if sweep is not None and "points" in sweep:
                written += plot_fsdp(sweep, out)
            truth = find(f, "truth", "fsdp/truth")
            if truth is not None and "points" in truth:
                written += plot_truth(truth, sweep, out)
    finally:
        for f in files:
            f.close()
    for p in written:
        print(p)
    if not written:
        sys.stderr.write(f"plot.py: nothing to plot in {path}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
