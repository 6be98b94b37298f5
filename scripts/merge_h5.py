#!/usr/bin/python3
"""Gathers several mlprio HDF5 result files into one, each under a group of its own.

Usage: scripts/merge_h5.py OUT.h5 NAME=FILE.h5 [NAME=FILE.h5 ...] [--errors NAME=FILE.csv]

Each input's root attributes become the attributes of /NAME; its groups and datasets are copied
under /NAME. `--errors` takes the `method,rel_err` CSV that `mlprio-model evaluate --plot` writes
and stores each method's relative errors as /NAME/errors/<method> (float64). The output root carries format="mlprio", format_version=1, kind="demo" and the list
of parts. Written to a temporary name and renamed, like every mlprio result file.
"""
import csv
import os
import sys

import h5py


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    out = argv[1]
    tmp = f"{out}.tmp.{os.getpid()}"
    parts = []
    try:
        with h5py.File(tmp, "w") as dst:
            dst.attrs["format"] = "mlprio"
            dst.attrs["format_version"] = 1
            dst.attrs["kind"] = "demo"
            specs = argv[2:]
            while "--errors" in specs:
                i = specs.index("--errors")
                if i + 1 >= len(specs):
                    sys.stderr.write("merge_h5.py: --errors needs NAME=FILE.csv\n")
                    return 2
                name, _, path = specs[i + 1].partition("=")
                errors = {}
                with open(path, newline="") as fh:
                    for row in csv.DictReader(fh):
                        errors.setdefault(row["method"], []).append(float(row["rel_err"]))
                g = dst.create_group(name).create_group("errors")
                for method, values in errors.items():
                    g.create_dataset(method, data=values, dtype="f8")
                parts.append(name)
                del specs[i:i + 2]
            for spec in specs:
                name, _, path = spec.partition("=")
                if not name or not path:
                    sys.stderr.write(f"merge_h5.py: '{spec}' is not NAME=FILE.h5\n")
                    return 2
                with h5py.File(path, "r") as src:
                    if src.attrs.get("format") not in ("mlprio", b"mlprio"):
                        sys.stderr.write(f"merge_h5.py: {path} is not an mlprio result file\n")
                        return 2
                    g = dst.create_group(name)
                    for k, v in src.attrs.items():
                        g.attrs[k] = v
                    for child in src:
                        src.copy(child, g)
                parts.append(name)
            dst.attrs["parts"] = ",".join(parts)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
