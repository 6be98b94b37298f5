#!/usr/bin/env python3
"""Ground truth for the FSDP profiler: trains real FSDP2 steps with PyTorch for each configuration
of a matrix file (truth_config.py) over a minibatch range, searched coarse-to-fine
(truth_search.py), and writes per configuration OUT/<name>.truth.h5 (the /truth layout,
truth_h5.py) and the memory snapshots of its boundary minibatches (OUT/<name>.mbs_<N>.pickle.gz).

    truth_harness.py run MATRIX.json --out DIR [--only NAME,...] [--time-budget-s S]

Each configuration runs in a process of its own (one per GPU under torchrun for real ranks
beyond one), started with its PYTORCH_CUDA_ALLOC_CONF (the allocator reads it once, when CUDA
starts) and killed when its share of the time budget is spent; it appends each measured point
to OUT/<name>.points.jsonl as soon as it has it, so a killed configuration keeps the points it
finished. The parent imports no torch.

Exit codes: 0 every configuration ran to the end of its search; 1 some stopped early (time
budget, error); 2 bad input; 77 skipped: no torch, no transformers or no CUDA device here
(nothing was measured, which is never reported as passed)."""
import argparse
import glob
import importlib.util
import json
import os
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import truth_config  # noqa: E402
import truth_search  # noqa: E402

EXIT_SKIPPED = 77
CHILD_GRACE_S = 20  # start-up (import torch, transformers, CUDA context) on top of the search


def points_path(out, name):
    return os.path.join(out, f"{name}.points.jsonl")


def snapshot_name(name, mbs):
    return f"{name}.mbs_{mbs}.pickle.gz"


# ---- child: one configuration, in its own process ------------------------------------------

def point_timed_out(cfg, out, mbs):
    if os.environ.get("RANK", "0") == "0":  # torchrun's other ranks leave the record to rank 0
        with open(points_path(out, cfg.name), "a", encoding="utf-8") as f:
            f.write(json.dumps({"mbs": mbs, "error": f"timed out after {cfg.point_timeout_s} s "
                                "(point_timeout_s)"}) + "\n")
    print(f"{cfg.name}: mbs {mbs} timed out after {cfg.point_timeout_s} s", flush=True)
    os._exit(124)


def run_child(cfg, out, deadline, trainer=None):
    """Measures one configuration; `trainer` is truth_train (the tests pass a stand-in with
    the same four functions)."""
    if trainer is None:
        try:
            import torch
            import transformers  # noqa: F401
        except ImportError as e:
            print(f"skipped: {e}", flush=True)
            return EXIT_SKIPPED
        if not torch.cuda.is_available():
            print("skipped: torch sees no CUDA device", flush=True)
            return EXIT_SKIPPED
        import truth_train as trainer
    budget = trainer.set_budget(cfg)
    mesh = trainer.init_distributed(cfg)
    device = trainer.device_info()
    # With real ranks every rank runs this search; rank 0 alone writes, and the ranks agree on
    # each point's level and on stopping, so that all of them take the same next size.
    writer = trainer.rank() == 0
    if writer:
        with open(os.path.join(out, f"{cfg.name}.device.json"), "w", encoding="utf-8") as f:
            json.dump({"device": device, "budget_bytes": budget}, f)
    slowest = [0.0]

    def measure(mbs):
        left = deadline - time.time()
        if trainer.agree(cfg, int(left < max(5.0, 1.5 * slowest[0]))):
            raise truth_search.StopSearch()
        snap = (os.path.join(out, snapshot_name(cfg.name, mbs))
                if cfg.snapshots and writer else None)
        # A point that hangs (a stuck collective, a wedged GPU) cannot be interrupted from
        # Python: the watchdog records it as an error and ends the process.
        watchdog = threading.Timer(cfg.point_timeout_s, point_timed_out, (cfg, out, mbs))
        watchdog.daemon = True
        watchdog.start()
        try:
            p = trainer.run_point(cfg, mesh, mbs, snap)
        except Exception as e:  # recorded and ends the search: the point is not a measurement
            p = {"mbs": mbs, "error": f"{type(e).__name__}: {e}"[:2000]}
        try:
            level = trainer.agree(cfg, truth_search.level_of(p))
        finally:
            watchdog.cancel()
        slowest[0] = max(slowest[0], p.get("wall_s", 0.0))
        if writer:
            with open(points_path(out, cfg.name), "a", encoding="utf-8") as f:
                f.write(json.dumps(p) + "\n")
            print(f"{cfg.name}: mbs {mbs} -> {truth_search.LEVEL_NAMES[level]} (retries/step "
                  f"{p.get('retries_per_step', 0):.2f}, {p.get('wall_s', 0):.1f} s)", flush=True)
        return level

    truth_search.search(cfg.mbs_lo, cfg.mbs_hi, cfg.coarse_step, measure)
    return 0


# ---- parent: the matrix ----------------------------------------------------------------------

def read_points(out, name):
    """The points a child wrote (a last line cut short by a kill is dropped), by minibatch."""
    pts = {}
    path = points_path(out, name)
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                p = json.loads(line)
            except ValueError:
                continue
            pts[p["mbs"]] = p
    return [pts[k] for k in sorted(pts)]


def assemble(cfg, out, status, command_line=""):
    """OUT/<name>.truth.h5 from what the child left; snapshots other than the boundary
    minibatches' are deleted. Returns the run dict written."""
    import snapshot_summary
    import truth_h5
    points = read_points(out, cfg.name)
    dev_path = os.path.join(out, f"{cfg.name}.device.json")
    dev = {}
    if os.path.exists(dev_path):
        with open(dev_path, encoding="utf-8") as f:
            dev = json.load(f)
    levels = {p["mbs"]: truth_search.level_of(p) for p in points}
    max_safe, first_retry, first_oom, _ = truth_search.boundaries(levels)
    keep = {snapshot_name(cfg.name, m) for m in (max_safe, first_retry, first_oom) if m}
    for p in points:
        name = snapshot_name(cfg.name, p["mbs"])
        path = os.path.join(out, name)
        p["snapshot"] = None
        if name in keep and os.path.exists(path):
            p["snapshot"] = name
            try:
                p["snapshot_summary"] = snapshot_summary.summarise(snapshot_summary.load(path))
            except snapshot_summary.SnapshotError as e:
                p["snapshot_error"] = str(e)
    # Snapshots of the other minibatches (also one a killed child was writing) go.
    for path in glob.glob(os.path.join(out, glob.escape(cfg.name) + ".mbs_*.pickle.gz*")):
        if os.path.basename(path) not in keep:
            os.remove(path)
    run = {"config": json.loads(cfg.to_json()), "device": dev.get("device", {}),
           "budget_bytes": dev.get("budget_bytes", cfg.budget_bytes), "points": points,
           "status": status}
    truth_h5.write_truth_file(os.path.join(out, f"{cfg.name}.truth.h5"), run, command_line)
    return run


def child_argv(cfg, out, deadline):
    """The measuring process of one configuration: this script's `child`, under torchrun with
    one process per GPU for real ranks beyond one."""
    argv = [sys.executable]
    if cfg.ranks == "real" and cfg.world_size > 1:
        argv += ["-m", "torch.distributed.run", "--standalone",
                 f"--nproc-per-node={cfg.world_size}"]
    return argv + [os.path.abspath(__file__), "child", "--config", cfg.to_json(), "--out", out,
                   "--deadline", str(deadline)]


def run_matrix(configs, out, time_budget_s, command_line):
    os.makedirs(out, exist_ok=True)
    start = time.time()
    any_incomplete = False
    for i, cfg in enumerate(configs):
        left = time_budget_s - (time.time() - start)
        share = left / (len(configs) - i)
        if share < CHILD_GRACE_S + 10:
            print(f"{cfg.name}: not run, {left:.0f} s of the time budget left", flush=True)
            any_incomplete = True
            continue
        if os.path.exists(points_path(out, cfg.name)):
            os.remove(points_path(out, cfg.name))
        env = dict(os.environ)
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        env.update(cfg.alloc_env())
        argv = child_argv(cfg, out, time.time() + share - 5)
        print(f"== {cfg.name}: {share:.0f} s, PYTORCH_CUDA_ALLOC_CONF={cfg.alloc_conf!r}",
              flush=True)
        t0 = time.time()
        try:
            rc = subprocess.run(argv, env=env, timeout=share + CHILD_GRACE_S).returncode
            status = "complete" if rc == 0 else f"failed rc={rc}"
        except subprocess.TimeoutExpired:
            rc, status = None, "killed at its time share"
        if rc == EXIT_SKIPPED:
            print("truth_harness: skipped (see the line above): nothing measured", flush=True)
            return EXIT_SKIPPED
        run = assemble(cfg, out, status, command_line)
        levels = {p["mbs"]: truth_search.level_of(p) for p in run["points"]}
        b = truth_search.boundaries(levels)
        print(f"   {status} in {time.time() - t0:.0f} s: {len(run['points'])} points, "
              f"max_safe {b[0]}, first_retry {b[1]}, first_oom {b[2]}, exact {b[3]}", flush=True)
        any_incomplete |= status != "complete"
    return 1 if any_incomplete else 0


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="measure every configuration of a matrix file")
    r.add_argument("matrix")
    r.add_argument("--out", required=True)
    r.add_argument("--only", default="", help="comma-separated configuration names")
    r.add_argument("--time-budget-s", type=float, default=600.0,
                   help="wall time for the whole matrix, shared out configuration by "
                        "configuration (default 600)")
    c = sub.add_parser("child", help=argparse.SUPPRESS)
    c.add_argument("--config", required=True)
    c.add_argument("--out", required=True)
    c.add_argument("--deadline", type=float, required=True)
    a = ap.parse_args(argv[1:])
    if a.cmd == "child":
        return run_child(truth_config.TruthConfig.from_json(a.config), a.out, a.deadline)
    try:
        configs = truth_config.load_matrix(a.matrix)
    except (OSError, truth_config.ConfigError) as e:
        print(f"truth_harness: {e}", file=sys.stderr)
        return 2
    if a.only:
        names = a.only.split(",")
        unknown = [n for n in names if n not in {c.name for c in configs}]
        if unknown:
            print(f"truth_harness: --only: no configuration '{unknown[0]}' in {a.matrix}",
                  file=sys.stderr)
            return 2
        configs = [c for c in configs if c.name in names]
    for mod in ("torch", "transformers", "h5py", "numpy"):
        if importlib.util.find_spec(mod) is None:
            print(f"skipped: no {mod} for {sys.executable}: the ground truth needs a GPU machine"
                  " with PyTorch, transformers, h5py and numpy")
            return EXIT_SKIPPED
    return run_matrix(configs, a.out, a.time_budget_s, " ".join(argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
