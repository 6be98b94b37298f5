#!/usr/bin/env python3
"""Convert a PyTorch memory snapshot pickle (torch.cuda.memory._dump_snapshot) to JSON for
`mlprio-fsdp replay`. Needs only the standard library (no torch). Python ints are arbitrary
precision, so 64-bit addresses and stream handles are written exactly; values JSON cannot hold
(bytes, tuples of frames, ...) are written as strings."""
import json
import pickle
import sys

if len(sys.argv) != 3:
    sys.exit("usage: snapshot_to_json.py SNAPSHOT.pickle OUT.json")
with open(sys.argv[1], "rb") as f:
    snapshot = pickle.load(f)
with open(sys.argv[2], "w") as f:
    json.dump(snapshot, f, default=str)
