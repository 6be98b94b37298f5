"""Reads a PyTorch memory snapshot (the pickle `torch.cuda.memory._dump_snapshot` writes, gzip'd
or not, or its JSON from scripts/snapshot_to_json.py) without torch, counts what its allocator
did, and writes the frame-free JSON that `mlprio-fsdp replay --snapshot` reads.

The pickle is a dict of builtins only ("segments", "device_traces", "allocator_settings", ...):
it is loaded with an unpickler that refuses every class or function reference, so a snapshot
cannot run code, and nesting deeper than MAX_DEPTH is refused as in the C++ reader.

    snapshot_summary.py SNAPSHOT[.pickle|.json] [--json-out OUT.json] [--device N]"""
import gzip
import io
import json
import pickle
import sys

MAX_DEPTH = 64
MAX_BYTES = 4 << 30
ACTIONS = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
           "segment_map", "segment_unmap", "oom", "snapshot")


class SnapshotError(ValueError):
    """A file that is not a memory snapshot this reader can use; the message says why."""


class _BuiltinsOnly(pickle.Unpickler):
    def find_class(self, module, name):
        raise SnapshotError(f"snapshot pickle refers to {module}.{name}: a memory snapshot holds "
                            "only dicts, lists, tuples, numbers and strings")


def _depth(obj, where, d=0):
    if d > MAX_DEPTH:
        raise SnapshotError(f"{where}: nested deeper than {MAX_DEPTH} levels")
    if isinstance(obj, dict):
        for v in obj.values():
            _depth(v, where, d + 1)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _depth(v, where, d + 1)


def load(path):
    """The snapshot dict of a pickle or JSON file."""
    with open(path, "rb") as f:
        data = f.read(MAX_BYTES + 1)
    if data[:2] == b"\x1f\x8b":  # the harness keeps its snapshots gzip'd
        try:
            with gzip.open(io.BytesIO(data)) as g:
                data = g.read(MAX_BYTES + 1)
        except (OSError, EOFError) as e:
            raise SnapshotError(f"{path}: not a readable gzip file: {e}") from None
    if len(data) > MAX_BYTES:
        raise SnapshotError(f"{path}: larger than {MAX_BYTES >> 30} GiB")
    if data[:1] == b"\x80":
        try:
            snap = _BuiltinsOnly(io.BytesIO(data)).load()
        except SnapshotError as e:
            raise SnapshotError(f"{path}: {e}") from None
        except Exception as e:  # a truncated or corrupt pickle: any of pickle's errors
            raise SnapshotError(f"{path}: not a readable pickle: {e}") from None
    else:
        try:
            snap = json.loads(data)
        except ValueError as e:
            raise SnapshotError(f"{path}: neither a pickle nor JSON: {e}") from None
    if not isinstance(snap, dict) or not isinstance(snap.get("device_traces"), list):
        raise SnapshotError(f"{path}: expected a dict with \"device_traces\" (a list per device),"
                            " as torch.cuda.memory._snapshot() returns")
    _depth(snap, path)
    return snap


def pick_device(snap, device=None):
    traces = snap["device_traces"]
    if device is not None:
        if not 0 <= device < len(traces):
            raise SnapshotError(f"device {device}: the snapshot has {len(traces)} device traces")
        return device
    return next((i for i, t in enumerate(traces) if t), 0)


def summarise(snap, device=None):
    """Counts of each trace action of one device, the segments at the moment of the dump, and
    the allocated and reserved peaks the trace itself implies (starting from empty when the
    recording started)."""
    d = pick_device(snap, device)
    trace = snap["device_traces"][d] if snap["device_traces"] else []
    counts = {a: 0 for a in ACTIONS}
    allocated = reserved = peak_alloc = peak_reserved = 0
    for i, e in enumerate(trace):
        if not isinstance(e, dict) or "action" not in e:
            raise SnapshotError(f"device_traces[{d}][{i}]: expected an entry with \"action\"")
        a = e["action"]
        counts[a] = counts.get(a, 0) + 1
        size = int(e.get("size", 0))
        if a == "alloc":
            allocated += size
            peak_alloc = max(peak_alloc, allocated)
        elif a == "free_completed":
            allocated -= size
        elif a in ("segment_alloc", "segment_map"):
            reserved += size
            peak_reserved = max(peak_reserved, reserved)
        elif a in ("segment_free", "segment_unmap"):
            reserved -= size
    segs = [s for s in snap.get("segments", []) if isinstance(s, dict)
            and int(s.get("device", d)) == d]
    out = {"device": d, "entries": len(trace), **counts,
           "segments": len(segs),
           "reserved_bytes": sum(int(s.get("total_size", 0)) for s in segs),
           "allocated_bytes": sum(int(s.get("allocated_size", 0)) for s in segs),
           "expandable_segments": sum(1 for s in segs if s.get("is_expandable")),
           "trace_peak_allocated_bytes": peak_alloc,
           "trace_peak_reserved_bytes": peak_reserved}
    return out


def replay_json(snap):
    """The snapshot without stack frames (which replay ignores and which make most of a
    snapshot's size), as the JSON `mlprio-fsdp replay --snapshot` reads."""
    keep = ("action", "addr", "size", "stream", "time_us", "device_free")
    traces = [[{k: e[k] for k in keep if k in e} for e in t] for t in snap["device_traces"]]
    segments = [{k: v for k, v in s.items() if k not in ("frames", "blocks")}
                for s in snap.get("segments", []) if isinstance(s, dict)]
    settings = snap.get("allocator_settings", {})
    return {"segments": segments, "device_traces": traces,
            "allocator_settings": settings if isinstance(settings, dict) else {}}


def write_replay_json(snap, path):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(replay_json(snap), f, default=str)


def main(argv):
    args = argv[1:]
    out = device = None
    if "--json-out" in args:
        i = args.index("--json-out")
        out = args[i + 1] if i + 1 < len(args) else None
        del args[i:i + 2]
    if "--device" in args:
        i = args.index("--device")
        device = int(args[i + 1])
        del args[i:i + 2]
    if len(args) != 1 or (out is None and "--json-out" in argv):
        sys.stderr.write(__doc__ + "\n")
        return 2
    try:
        snap = load(args[0])
        print(json.dumps(summarise(snap, device), indent=2))
        if out:
            write_replay_json(snap, out)
    except (OSError, SnapshotError) as e:
        sys.stderr.write(f"snapshot_summary.py: {e}\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
