"""The /truth group of the profiler's HDF5 layout: what PyTorch itself did for one configuration
(fsdp_profiler/README.md, "Validation against PyTorch", lists every field). Written beside a
`mlprio-fsdp sweep`'s /sweep group (the comparison does that) or alone in a file of its own,
whose root then carries the same format attributes as the C++ writers (`format` "mlprio",
`kind` "fsdp", `fsdp_command` "truth", `fsdp_layout_version`). Needs h5py and numpy only.

A run, as the harness hands it over, is a dict:
  {"config": TruthConfig fields, "device": {"name", "total_memory_bytes", "torch_version",
   "cuda_version", ...}, "points": [point, ...]}
and a point {"mbs", "oom", "oom_step", "error", "retries_per_step", "first_step_retries",
  "step_retries": [...], "step_ms": [...], "step_reserved_bytes": [...],
  "step_allocated_peak_bytes": [...], "memory_stats": {flat memory_stats()}, "snapshot": NAME,
  "snapshot_summary": {...}, "wall_s"}."""
import json
import math
import os
import time

import h5py
import numpy as np

import truth_config
import truth_search

FORMAT_NAME = "mlprio"
FORMAT_VERSION = 1
# fsdp_layout_version 2: the layout that may hold /truth (fsdp_profiler/src/h5_output.cpp
# writes the same number); files without the attribute are version 1 and have no /truth.
FSDP_LAYOUT_VERSION = 2
TRUTH_LAYOUT_VERSION = 1

POINT_DTYPE = np.dtype([
    ("mbs", "<i8"), ("status", "i1"), ("oom", "i1"), ("oom_step", "<i8"),
    ("retries_per_step", "<f8"), ("first_step_retries", "<i8"), ("num_alloc_retries", "<i8"),
    ("num_ooms", "<i8"), ("peak_reserved_bytes", "<i8"), ("peak_allocated_bytes", "<i8"),
    ("segments_peak", "<i8"), ("segments_end", "<i8"), ("num_device_alloc", "<i8"),
    ("num_device_free", "<i8"), ("num_sync_all_streams", "<i8"), ("step_ms", "<f8"),
    ("first_step_ms", "<f8"), ("samples_per_s", "<f8"), ("wall_s", "<f8")])
STEP_COLUMNS = ("step_retries", "step_ms", "step_reserved_bytes", "step_allocated_peak_bytes")
SNAPSHOT_ATTRS = ("entries", "alloc", "free_completed", "segment_alloc", "segment_free",
                  "segment_map", "segment_unmap", "oom", "segments", "reserved_bytes")


class TruthFileError(ValueError):
    """A file or group that is not the /truth layout this reader knows."""


def _stat(stats, key):
    return int(stats.get(key, 0))


def _mean(xs):
    return float(sum(xs) / len(xs)) if xs else math.nan


def point_row(p, world_size):
    st = p.get("memory_stats", {})
    step_ms = list(p.get("step_ms", []))
    steady = step_ms[1:]
    mean_ms = _mean(steady)
    sps = p["mbs"] * world_size / (mean_ms / 1000.0) if steady and mean_ms > 0 else math.nan
    return (p["mbs"], truth_search.level_of(p), int(bool(p.get("oom"))), int(p.get("oom_step", -1)),
            float(p.get("retries_per_step", 0.0)), int(p.get("first_step_retries", 0)),
            _stat(st, "num_alloc_retries"), _stat(st, "num_ooms"),
            _stat(st, "reserved_bytes.all.peak"), _stat(st, "allocated_bytes.all.peak"),
            _stat(st, "segment.all.peak"), _stat(st, "segment.all.current"),
            _stat(st, "num_device_alloc"), _stat(st, "num_device_free"),
            _stat(st, "num_sync_all_streams"), mean_ms,
            float(step_ms[0]) if step_ms else math.nan, sps, float(p.get("wall_s", math.nan)))


def write_truth_group(parent, run):
    """Writes /truth under `parent` (an open h5py File or Group) from a harness run."""
    cfg = run["config"]
    dev = run.get("device", {})
    g = parent.create_group("truth")
    g.attrs["truth_layout_version"] = TRUTH_LAYOUT_VERSION
    g.attrs["config"] = json.dumps(cfg, sort_keys=True)
    for k in ("name", "model", "ranks", "precision", "attention", "alloc_conf"):
        g.attrs[k] = str(cfg.get(k, ""))
    for k in ("world_size", "steps", "mbs_lo", "mbs_hi", "coarse_step"):
        g.attrs[k] = int(cfg.get(k, 0))
    # The lengths trained (a configuration's 0 means the model's own).
    c = truth_config.make_config({k: v for k, v in cfg.items() if k in truth_config.FIELDS},
                                 "config")
    g.attrs["seq_len"] = c.effective_seq_len
    g.attrs["tgt_len"] = c.effective_tgt_len
    g.attrs["activation_checkpointing"] = int(bool(cfg.get("activation_checkpointing")))
    g.attrs["budget_bytes"] = int(run.get("budget_bytes", cfg.get("budget_bytes", 0)))
    for k in ("name", "torch_version", "cuda_version", "transformers_version", "hostname"):
        g.attrs["device_" + k if k == "name" else k] = str(dev.get(k, ""))
    g.attrs["total_memory_bytes"] = int(dev.get("total_memory_bytes", 0))
    g.attrs["status"] = str(run.get("status", "complete"))
    points = sorted(run.get("points", []), key=lambda p: p["mbs"])
    levels = {p["mbs"]: truth_search.level_of(p) for p in points}
    max_safe, first_retry, first_oom, exact = truth_search.boundaries(levels)
    g.attrs["max_safe_mbs"] = max_safe
    g.attrs["first_retry_mbs"] = first_retry
    g.attrs["first_oom_mbs"] = first_oom
    g.attrs["boundaries_exact"] = int(exact)
    g.attrs["status_names"] = "0=safe,1=retry,2=oom,3=error"
    ws = int(cfg.get("world_size", 1))
    g.create_dataset("points", data=np.array([point_row(p, ws) for p in points], dtype=POINT_DTYPE))
    errors = [p for p in points if p.get("error")]
    if errors:
        e = g.create_group("errors")
        for p in errors:
            e.attrs[f"mbs_{p['mbs']}"] = str(p["error"])[:4000]
    ms = g.create_group("memory_stats")
    steps = g.create_group("steps")
    snaps = g.create_group("snapshots")
    for p in points:
        key = f"mbs_{p['mbs']}"
        s = ms.create_group(key)
        for k, v in sorted(p.get("memory_stats", {}).items()):
            if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
                s.attrs[k] = int(v)
        st = steps.create_group(key)
        for col in STEP_COLUMNS:
            dtype = "<f8" if col == "step_ms" else "<i8"
            st.create_dataset(col, data=np.asarray(p.get(col, []), dtype=dtype))
        if p.get("snapshot"):
            sn = snaps.create_group(key)
            sn.attrs["file"] = str(p["snapshot"])
            for k, v in (p.get("snapshot_summary") or {}).items():
                if k in SNAPSHOT_ATTRS:
                    sn.attrs[k] = int(v)
    return g


def set_root_attrs(f, command_line="", config_json=""):
    """The root attributes every mlprio result file carries, for a /truth-only file."""
    f.attrs["format"] = FORMAT_NAME
    f.attrs["format_version"] = FORMAT_VERSION
    f.attrs["kind"] = "fsdp"
    f.attrs["fsdp_command"] = "truth"
    f.attrs["fsdp_layout_version"] = FSDP_LAYOUT_VERSION
    f.attrs["tool_version"] = "fsdp_profiler/validate"
    f.attrs["command_line"] = command_line
    f.attrs["config"] = config_json
    f.attrs["created"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def write_truth_file(path, run, command_line=""):
    """A file holding one run's /truth, written whole (temporary name, then rename)."""
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with h5py.File(tmp, "w") as f:
            set_root_attrs(f, command_line, json.dumps(run["config"], sort_keys=True))
            write_truth_group(f, run)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _s(v):
    return v.decode() if isinstance(v, bytes) else v


def read_truth(f_or_group):
    """The /truth group of an open file (or the group itself) as plain Python values:
    {"attrs": {...}, "config": TruthConfig fields, "points": [row dicts], "memory_stats":
    {mbs: {...}}, "snapshots": {mbs: {"file", ...}}, "errors": {mbs: text}}."""
    g = f_or_group["truth"] if "truth" in f_or_group else f_or_group
    if "truth_layout_version" not in g.attrs:
        raise TruthFileError(f"{g.name}: no truth_layout_version attribute: not a /truth group")
    v = int(g.attrs["truth_layout_version"])
    if v > TRUTH_LAYOUT_VERSION:
        raise TruthFileError(f"{g.name}: truth_layout_version {v}; this reader knows up to "
                             f"{TRUTH_LAYOUT_VERSION}")
    attrs = {k: _s(val.item() if hasattr(val, "item") else val) for k, val in g.attrs.items()}
    pts = g["points"][:]
    points = [{name: pts[name][i].item() for name in pts.dtype.names} for i in range(len(pts))]
    out = {"attrs": attrs, "config": json.loads(attrs["config"]), "points": points,
           "memory_stats": {}, "snapshots": {}, "errors": {}, "steps": {}}
    for key, s in g["memory_stats"].items():
        out["memory_stats"][int(key[4:])] = {k: int(val) for k, val in s.attrs.items()}
    for key, s in g["steps"].items():
        out["steps"][int(key[4:])] = {c: s[c][:].tolist() for c in s.keys()}
    for key, s in g["snapshots"].items():
        out["snapshots"][int(key[4:])] = {k: _s(val.item() if hasattr(val, "item") else val)
                                          for k, val in s.attrs.items()}
    if "errors" in g:
        out["errors"] = {int(k[4:]): _s(val) for k, val in g["errors"].attrs.items()}
    return out
