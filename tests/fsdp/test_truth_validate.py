"""CPU tests of the ground-truth harness's pure-Python parts (fsdp_profiler/validate/): matrix
parsing and the sweep flags a configuration maps to, the coarse-to-fine search, the /truth HDF5
group, snapshot reading, the harness's assembly of a child's points and its skip path, and the
comparison against `mlprio-fsdp` (when MLPRIO_FSDP names the program). Fixtures in
data/truth/ are hand-made in the shapes torch writes (memory_stats() keys, a snapshot pickle).

    MLPRIO_FSDP=build/release/bin/mlprio-fsdp python3 -m unittest test_truth_validate"""
import gzip
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.normpath(os.path.join(HERE, "..", ".."))
VALIDATE = os.path.join(SRC, "fsdp_profiler", "validate")
DATA = os.path.join(HERE, "data", "truth")
sys.path.insert(0, VALIDATE)

import h5py  # noqa: E402

import snapshot_summary  # noqa: E402
import truth_compare  # noqa: E402
import truth_config  # noqa: E402
import truth_h5  # noqa: E402
import truth_harness  # noqa: E402
import truth_search  # noqa: E402

MiB = 1 << 20
TINY = {"name": "gpt2-tiny-e8", "model": "gpt2-tiny", "world_size": 8, "ranks": "emulated",
        "budget": "1GiB", "mbs": "1:24", "coarse_step": 4, "steps": 3,
        "alloc_conf": "expandable_segments:False"}


def read(path, mode="r"):
    with open(path, mode) as f:
        return f.read()


def write(path, data):
    with open(path, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)


def load_json(path):
    return json.loads(read(path))


def matrix(*configs, defaults=None):
    return json.dumps({"format": "mlprio-fsdp-truth-matrix", "version": 1,
                       "defaults": defaults or {}, "configs": list(configs)})


class TempDir(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="truth_test_")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)


class ConfigTest(unittest.TestCase):
    def test_defaults_overlay_and_sweep_flags(self):
        cfgs = truth_config.load_matrix(text=matrix(
            {"name": "t5", "model": "t5-3b", "seq_len": 128, "tgt_len": 128, "mbs": "8:40",
             "alloc_conf": "expandable_segments:True", "activation_checkpointing": True},
            {"name": "g", "model": "gpt2-xl", "world_size": 8, "ranks": "emulated",
             "attention": "sdpa", "budget": "80GiB"},
            defaults={"budget": "70GiB", "steps": 4}))
        t5, g = cfgs
        self.assertEqual(t5.budget_bytes, 70 << 30)
        self.assertEqual((t5.mbs_lo, t5.mbs_hi, t5.steps), (8, 40, 4))
        self.assertEqual(t5.alloc_env(), {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
        argv = t5.sweep_argv("mlprio-fsdp", 8, 40)
        self.assertEqual(argv[:3], ["mlprio-fsdp", "sweep", "--model"])
        flags = " ".join(argv)
        for part in ("--model t5-3b", "--world-size 1", f"--capacity {70 << 30}", "--mbs 8:40",
                     "--steps 4", "--fsdp 2", "--seq-len 128", "--tgt-len 128", "--past-oom",
                     "--alloc-conf expandable_segments:True", "--activation-checkpointing"):
            self.assertIn(part, flags)
        self.assertNotIn("--flash-attention", flags)
        gflags = " ".join(g.sweep_argv("b", 1, 9, capacity_bytes=123, models_file="m.json"))
        for part in ("--world-size 8", "--capacity 123", "--seq-len 1024", "--flash-attention",
                     "--models-file m.json"):
            self.assertIn(part, gflags)
        self.assertNotIn("--tgt-len", gflags)  # decoder-only
        self.assertEqual(g.alloc_env(), {})
        # The configuration travels to the child process as JSON and back unchanged.
        self.assertEqual(truth_config.TruthConfig.from_json(t5.to_json()), t5)

    def test_sizes(self):
        self.assertEqual(truth_config.parse_bytes("60GiB"), 60 << 30)
        self.assertEqual(truth_config.parse_bytes("40GB"), 40 * 10**9)
        self.assertEqual(truth_config.parse_bytes("4096"), 4096)
        for bad in ("", "GiB", "12 parsecs", "0", "2PiB"):
            with self.assertRaises(truth_config.ConfigError):
                truth_config.parse_bytes(bad)

    def test_errors_name_the_place(self):
        cases = [
            ({"name": "a", "model": "gpt2-xl", "colour": 1}, "configs[0] (a): unknown key 'colour'"),
            ({"name": "a", "model": "bert"}, "configs[0] (a).model: expected one of"),
            ({"name": "a", "model": "gpt2-xl", "world_size": 64},
             "configs[0] (a).world_size: real ranks are one process per GPU"),
            ({"name": "a", "model": "gpt2-xl", "mbs": "9:3"}, "(a).mbs: expected 1 <= LO <= HI"),
            ({"name": "a b", "model": "gpt2-xl"}, "configs[0].name: expected 1-64 characters"),
            ({"name": "a", "model": "gpt2-xl", "steps": 1}, "(a).steps: expected an integer from 2"),
            ({"name": "a", "model": "gpt2-xl", "budget": "lots"}, "(a).budget: bad size 'lots'"),
        ]
        for cfg, message in cases:
            with self.assertRaises(truth_config.ConfigError) as cm:
                truth_config.load_matrix(text=matrix(cfg))
            self.assertIn(message, str(cm.exception))
        with self.assertRaisesRegex(truth_config.ConfigError, "'a' appears twice"):
            truth_config.load_matrix(text=matrix({"name": "a", "model": "gpt2-xl"},
                                                 {"name": "a", "model": "t5-3b"}))
        with self.assertRaisesRegex(truth_config.ConfigError, "version 2; this reader knows 1"):
            truth_config.load_matrix(text=json.dumps({"format": "mlprio-fsdp-truth-matrix",
                                                      "version": 2, "configs": [{}]}))

    def test_committed_matrices_parse(self):
        for name in ("matrix_gpu.json", "matrix_smoke.json"):
            cfgs = truth_config.load_matrix(os.path.join(VALIDATE, name))
            self.assertTrue(cfgs, name)
        gpu = truth_config.load_matrix(os.path.join(VALIDATE, "matrix_gpu.json"))
        self.assertTrue({"gpt2-xl", "t5-3b"} <= {c.model for c in gpu})
        self.assertTrue({("real", 1), ("emulated", 8)} <= {(c.ranks, c.world_size) for c in gpu})
        self.assertTrue({"expandable_segments:False", "expandable_segments:True"}
                        <= {c.alloc_conf for c in gpu})


class SearchTest(unittest.TestCase):
    def world(self, first_retry, first_oom):
        measured = []

        def measure(mbs):
            measured.append(mbs)
            return (truth_search.OOM if mbs >= first_oom else
                    truth_search.RETRY if mbs >= first_retry else truth_search.SAFE)
        return measure, measured

    def test_finds_both_boundaries_exactly_with_few_points(self):
        for retry, oom in ((7, 10), (10, 11), (3, 3), (30, 31), (2, 40)):
            measure, measured = self.world(retry, oom)
            levels = truth_search.search(1, 64, 8, measure)
            max_safe, first_retry, first_oom, exact = truth_search.boundaries(levels)
            self.assertEqual((max_safe, first_oom), (retry - 1, oom), (retry, oom, levels))
            self.assertEqual(first_retry, retry if retry < oom else 0)
            self.assertTrue(exact)
            self.assertEqual(len(measured), len(set(measured)))  # never measured twice
            self.assertLessEqual(len(measured), 12)

    def test_the_order_of_the_fixture(self):
        measure, measured = self.world(10, 11)
        truth_search.search(1, 24, 4, measure)
        self.assertEqual(measured, [1, 5, 9, 13, 11, 10])

    def test_no_oom_in_range_and_oom_at_once(self):
        measure, measured = self.world(100, 200)
        levels = truth_search.search(1, 10, 4, measure)
        self.assertEqual(list(levels), [1, 5, 9, 10])
        self.assertEqual(truth_search.boundaries(levels), (10, 0, 0, True))
        measure, measured = self.world(1, 1)
        self.assertEqual(truth_search.boundaries(truth_search.search(1, 10, 4, measure)),
                         (0, 0, 1, True))

    def test_error_and_time_budget_stop_the_search(self):
        def failing(mbs):
            return truth_search.ERROR if mbs == 5 else truth_search.SAFE
        self.assertEqual(list(truth_search.search(1, 20, 4, failing)), [1, 5])

        def out_of_time(mbs):
            if mbs > 5:
                raise truth_search.StopSearch()
            return truth_search.SAFE
        levels = truth_search.search(1, 20, 4, out_of_time)
        self.assertEqual(list(levels), [1, 5])
        self.assertEqual(truth_search.boundaries({1: 0, 5: 1}), (1, 5, 0, False))

    def test_level_of_a_point(self):
        self.assertEqual(truth_search.level_of({"oom": True, "retries_per_step": 0}), 2)
        self.assertEqual(truth_search.level_of({"oom": False, "retries_per_step": 0.5}), 1)
        self.assertEqual(truth_search.level_of({"oom": False, "retries_per_step": 0}), 0)
        self.assertEqual(truth_search.level_of({"error": "boom"}), 3)


class SnapshotTest(TempDir):
    def test_reads_the_pickle_as_torch_writes_it(self):
        snap = snapshot_summary.load(os.path.join(DATA, "tiny_snapshot.pickle"))
        s = snapshot_summary.summarise(snap)
        self.assertEqual((s["entries"], s["alloc"], s["free_completed"], s["segment_alloc"],
                          s["segment_free"], s["oom"]), (13, 4, 2, 4, 1, 0))
        self.assertEqual((s["segments"], s["reserved_bytes"]), (3, 38 * MiB))
        self.assertEqual(s["trace_peak_reserved_bytes"], 38 * MiB)
        self.assertEqual(s["trace_peak_allocated_bytes"], 36 * MiB + 512)

    def test_gzip_and_json_forms_read_the_same(self):
        raw = read(os.path.join(DATA, "tiny_snapshot.pickle"), "rb")
        gz = os.path.join(self.dir, "s.pickle.gz")
        with gzip.open(gz, "wb") as f:
            f.write(raw)
        js = os.path.join(self.dir, "s.json")
        snapshot_summary.write_replay_json(snapshot_summary.load(gz), js)
        doc = load_json(js)
        self.assertNotIn("frames", doc["device_traces"][0][1])
        self.assertNotIn("blocks", doc["segments"][0])
        a = snapshot_summary.summarise(snapshot_summary.load(gz))
        b = snapshot_summary.summarise(snapshot_summary.load(js))
        self.assertEqual(a, b)

    def test_refuses_code_and_depth_and_junk(self):
        evil = os.path.join(self.dir, "evil.pickle")
        with open(evil, "wb") as f:
            pickle.dump({"device_traces": [[]], "x": os.getcwd}, f)
        with self.assertRaisesRegex(snapshot_summary.SnapshotError, "refers to posix.getcwd"):
            snapshot_summary.load(evil)
        deep = os.path.join(self.dir, "deep.json")
        nested = []
        for _ in range(70):
            nested = [nested]
        write(deep, json.dumps({"device_traces": [[]], "x": nested}))
        with self.assertRaisesRegex(snapshot_summary.SnapshotError, "deeper than 64"):
            snapshot_summary.load(deep)
        junk = os.path.join(self.dir, "junk")
        write(junk, b"\x80\x04garbage")
        with self.assertRaisesRegex(snapshot_summary.SnapshotError, "not a readable pickle"):
            snapshot_summary.load(junk)
        write(junk, json.dumps({"segments": []}))
        with self.assertRaisesRegex(snapshot_summary.SnapshotError, "device_traces"):
            snapshot_summary.load(junk)


def fixture_out(dirname):
    """The harness's output directory as a child leaves it for the tiny configuration."""
    for name in ("gpt2-tiny-e8.points.jsonl", "gpt2-tiny-e8.device.json"):
        shutil.copy(os.path.join(DATA, name), dirname)
    raw = read(os.path.join(DATA, "tiny_snapshot.pickle"), "rb")
    for mbs in (9, 10, 5):  # 5 is not a boundary: the assembly deletes it
        with gzip.open(os.path.join(dirname, f"gpt2-tiny-e8.mbs_{mbs}.pickle.gz"), "wb") as f:
            f.write(raw)
    return truth_config.load_matrix(text=matrix(TINY))[0]


class TruthH5Test(TempDir):
    def test_assembly_writes_the_truth_layout(self):
        cfg = fixture_out(self.dir)
        run = truth_harness.assemble(cfg, self.dir, "complete", "truth_harness.py run m.json")
        self.assertFalse(os.path.exists(os.path.join(self.dir, "gpt2-tiny-e8.mbs_5.pickle.gz")))
        self.assertEqual(len(run["points"]), 6)
        path = os.path.join(self.dir, "gpt2-tiny-e8.truth.h5")
        with h5py.File(path, "r") as f:
            self.assertEqual(f.attrs["format"], "mlprio")
            self.assertEqual(f.attrs["fsdp_command"], "truth")
            self.assertEqual(f.attrs["fsdp_layout_version"], 2)
            t = truth_h5.read_truth(f)
        a = t["attrs"]
        self.assertEqual((a["max_safe_mbs"], a["first_retry_mbs"], a["first_oom_mbs"],
                          a["boundaries_exact"]), (9, 10, 11, 1))
        self.assertEqual((a["budget_bytes"], a["world_size"], a["ranks"], a["device_name"]),
                         (1 << 30, 8, "emulated", "NVIDIA H100 80GB HBM3"))
        rows = {p["mbs"]: p for p in t["points"]}
        self.assertEqual(sorted(rows), [1, 5, 9, 10, 11, 13])
        self.assertEqual([rows[m]["status"] for m in (1, 9, 10, 11)], [0, 0, 1, 2])
        self.assertEqual((rows[10]["retries_per_step"], rows[10]["first_step_retries"],
                          rows[10]["num_alloc_retries"], rows[10]["segments_end"]), (1.0, 1, 1, 3))
        self.assertEqual((rows[11]["oom"], rows[11]["oom_step"], rows[13]["oom_step"]), (1, 2, 1))
        self.assertEqual(rows[10]["peak_reserved_bytes"], 38 * MiB)
        self.assertAlmostEqual(rows[10]["step_ms"], 35.1)
        self.assertAlmostEqual(rows[10]["samples_per_s"], 10 * 8 / 0.0351, places=6)
        self.assertEqual(t["memory_stats"][10]["num_alloc_retries"], 1)
        self.assertEqual(t["steps"][11]["step_retries"], [1, 2])
        self.assertEqual(sorted(t["snapshots"]), [9, 10])
        self.assertEqual(t["snapshots"][10]["file"], "gpt2-tiny-e8.mbs_10.pickle.gz")
        self.assertEqual(t["snapshots"][10]["segment_free"], 1)
        self.assertEqual(t["config"]["model"], "gpt2-tiny")
        self.assertEqual((t["config"]["seq_len"], a["seq_len"], a["tgt_len"]), (0, 128, 0))

    def test_realistic_memory_stats_and_errors_are_kept(self):
        st = load_json(os.path.join(DATA, "memory_stats_gpt2xl_w1.json"))
        run = {"config": json.loads(truth_config.load_matrix(text=matrix(
            {"name": "x", "model": "gpt2-xl", "budget": "70GiB"}))[0].to_json()),
            "points": [{"mbs": 3, "oom": False, "retries_per_step": 1.0, "step_ms": [900.0, 450.0],
                        "memory_stats": st},
                       {"mbs": 4, "error": "RuntimeError: NCCL went away"}]}
        path = os.path.join(self.dir, "x.truth.h5")
        truth_h5.write_truth_file(path, run)
        with h5py.File(path, "r") as f:
            t = truth_h5.read_truth(f)
        self.assertEqual(t["memory_stats"][3], st)
        self.assertEqual(t["errors"], {4: "RuntimeError: NCCL went away"})
        row = t["points"][0]
        self.assertEqual((row["num_alloc_retries"], row["segments_peak"],
                          row["peak_reserved_bytes"]), (2, 131, 75019780096))
        self.assertEqual(t["points"][1]["status"], truth_search.ERROR)

    def test_refuses_newer_layouts(self):
        path = os.path.join(self.dir, "n.h5")
        with h5py.File(path, "w") as f:
            f.create_group("truth").attrs["truth_layout_version"] = 9
        with h5py.File(path, "r") as f, self.assertRaisesRegex(truth_h5.TruthFileError,
                                                              "truth_layout_version 9"):
            truth_h5.read_truth(f)


class FakeTrainer:
    """truth_train's four functions without torch: safe below `retry`, retrying from it, out of
    memory from `oom`; a snapshot file per point as the real one writes; `hang` sleeps."""

    def __init__(self, retry, oom, hang=None, fail=None):
        self.retry, self.oom, self.hang, self.fail, self.calls = retry, oom, hang, fail, []

    def device_info(self):
        return {"name": "stand-in GPU", "total_memory_bytes": 80 << 30}

    def set_budget(self, cfg):
        return cfg.budget_bytes - 4096

    def init_distributed(self, cfg):
        return "mesh"

    def rank(self):
        return 0

    def agree(self, cfg, level):
        return level

    def run_point(self, cfg, mesh, mbs, snapshot_path=None):
        self.calls.append(mbs)
        if mbs == self.hang:
            time.sleep(60)
        if mbs == self.fail:
            raise RuntimeError("NCCL error: unhandled system error")
        r = 2 if mbs >= self.retry else 0
        p = {"mbs": mbs, "oom": mbs >= self.oom, "oom_step": 1 if mbs >= self.oom else -1,
             "step_retries": [1, r, r], "step_ms": [30.0, 10.0 + mbs, 10.0 + mbs],
             "first_step_retries": 1, "retries_per_step": float(r),
             "memory_stats": {"num_alloc_retries": 1 + 2 * r, "reserved_bytes.all.peak": mbs * MiB},
             "wall_s": 0.01}
        if snapshot_path:
            write(snapshot_path, gzip.compress(read(os.path.join(DATA, "tiny_snapshot.pickle"), "rb")))
            p["snapshot"] = os.path.basename(snapshot_path)
        return p


class HarnessChildTest(TempDir):
    def cfg(self, **kw):
        return truth_config.load_matrix(text=matrix(dict(TINY, **kw)))[0]

    def test_search_points_and_kept_snapshots(self):
        cfg = self.cfg()
        fake = FakeTrainer(retry=10, oom=11)
        self.assertEqual(truth_harness.run_child(cfg, self.dir, time.time() + 60, fake), 0)
        self.assertEqual(fake.calls, [1, 5, 9, 13, 11, 10])
        run = truth_harness.assemble(cfg, self.dir, "complete")
        self.assertEqual(run["budget_bytes"], (1 << 30) - 4096)
        self.assertEqual(sorted(f for f in os.listdir(self.dir) if f.endswith(".gz")),
                         [f"gpt2-tiny-e8.mbs_{m}.pickle.gz" for m in (10, 11, 9)])
        with h5py.File(os.path.join(self.dir, "gpt2-tiny-e8.truth.h5"), "r") as f:
            t = truth_h5.read_truth(f)
        self.assertEqual(sorted(t["snapshots"]), [9, 10, 11])
        self.assertEqual((t["attrs"]["max_safe_mbs"], t["attrs"]["first_retry_mbs"],
                          t["attrs"]["first_oom_mbs"]), (9, 10, 11))
        self.assertEqual(t["attrs"]["device_name"], "stand-in GPU")

    def test_real_ranks_beyond_one_start_under_torchrun(self):
        one = truth_harness.child_argv(self.cfg(ranks="real", world_size=1), self.dir, 9.0)
        self.assertEqual(one[:3], [sys.executable, os.path.join(VALIDATE, "truth_harness.py"),
                                   "child"])
        eight = truth_harness.child_argv(self.cfg(ranks="real", world_size=8), self.dir, 9.0)
        self.assertEqual(eight[:5], [sys.executable, "-m", "torch.distributed.run", "--standalone",
                                     "--nproc-per-node=8"])
        self.assertEqual(eight[5:7], one[1:3])
        emulated = truth_harness.child_argv(self.cfg(), self.dir, 9.0)
        self.assertNotIn("torch.distributed.run", emulated)
        cfg = truth_config.TruthConfig.from_json(eight[eight.index("--config") + 1])
        self.assertEqual((cfg.ranks, cfg.world_size), ("real", 8))

    def test_deadline_and_errors_end_the_search(self):
        fake = FakeTrainer(retry=10, oom=11)
        self.assertEqual(truth_harness.run_child(self.cfg(), self.dir, time.time(), fake), 0)
        self.assertEqual(fake.calls, [])
        fake = FakeTrainer(retry=10, oom=11, fail=9)
        truth_harness.run_child(self.cfg(snapshots=False), self.dir, time.time() + 60, fake)
        self.assertEqual(fake.calls, [1, 5, 9])
        pts = truth_harness.read_points(self.dir, "gpt2-tiny-e8")
        self.assertIn("NCCL error", pts[-1]["error"])

    def test_a_hung_point_is_recorded_and_ends_the_process(self):
        script = (f"import sys, time; sys.path[:0] = [{VALIDATE!r}, {HERE!r}]\n"
                  "import test_truth_validate as t, truth_harness\n"
                  "cfg = t.TruthConfigFor(point_timeout_s=1)\n"
                  f"truth_harness.run_child(cfg, {self.dir!r}, time.time() + 60,"
                  " t.FakeTrainer(retry=10, oom=11, hang=5))\n")
        p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           timeout=50)
        self.assertEqual(p.returncode, 124, p.stdout + p.stderr)
        pts = truth_harness.read_points(self.dir, "gpt2-tiny-e8")
        self.assertEqual([x["mbs"] for x in pts], [1, 5])
        self.assertIn("timed out after 1 s", pts[1]["error"])


def TruthConfigFor(**kw):
    return truth_config.load_matrix(text=matrix(dict(TINY, **kw)))[0]


class HarnessSkipTest(TempDir):
    def test_without_torch_it_is_skipped_not_passed(self):
        try:
            import torch  # noqa: F401
            self.skipTest("torch is installed here: the skip path is not taken")
        except ImportError:
            pass
        p = subprocess.run([sys.executable, os.path.join(VALIDATE, "truth_harness.py"), "run",
                            os.path.join(VALIDATE, "matrix_smoke.json"), "--out", self.dir],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 77, p.stdout + p.stderr)
        self.assertIn("skipped: no torch", p.stdout)
        self.assertEqual(os.listdir(self.dir), [])

    def test_unknown_only_name_is_exit_2(self):
        p = subprocess.run([sys.executable, os.path.join(VALIDATE, "truth_harness.py"), "run",
                            os.path.join(VALIDATE, "matrix_gpu.json"), "--out", self.dir,
                            "--only", "gpt2xl-w1-malloc,gpt2xl-w9"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("--only: no configuration 'gpt2xl-w9'", p.stderr)

    def test_bad_matrix_is_exit_2(self):
        bad = os.path.join(self.dir, "m.json")
        write(bad, matrix({"name": "a", "model": "bert"}))
        p = subprocess.run([sys.executable, os.path.join(VALIDATE, "truth_harness.py"), "run",
                            bad, "--out", self.dir], capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("configs[0] (a).model", p.stderr)


@unittest.skipUnless(os.environ.get("MLPRIO_FSDP"), "MLPRIO_FSDP names no mlprio-fsdp program")
class CompareTest(TempDir):
    def test_predicted_against_measured(self):
        fsdp = os.environ["MLPRIO_FSDP"]
        cfg = fixture_out(self.dir)
        truth_harness.assemble(cfg, self.dir, "complete")
        out = os.path.join(self.dir, "cmp")
        p = subprocess.run([sys.executable, os.path.join(VALIDATE, "truth_compare.py"), self.dir,
                            "--fsdp", fsdp, "--out", out], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        doc = load_json(os.path.join(out, "comparison.json"))
        self.assertEqual((doc["format"], doc["version"]), ("mlprio-fsdp-truth-comparison", 1))
        (r,) = doc["configs"]
        self.assertEqual(r["measured"], {"max_safe_mbs": 9, "first_retry_mbs": 10,
                                         "first_oom_mbs": 11, "exact": True, "points": 6})
        # The prediction is the sweep's own answer for the same configuration and budget.
        sweep = json.loads(subprocess.run(
            cfg.sweep_argv(fsdp, 1, 13, 1 << 30, truth_compare.DEFAULT_MODELS_FILE),
            capture_output=True, text=True, check=True).stdout)
        self.assertEqual(r["predicted"]["max_safe_mbs"], sweep["max_safe_mbs"])
        # The program declares the layout that may hold /truth in every file it writes.
        own = os.path.join(self.dir, "own.h5")
        subprocess.run(cfg.sweep_argv(fsdp, 1, 2, 1 << 30, truth_compare.DEFAULT_MODELS_FILE)
                       + ["--out", own], capture_output=True, check=True)
        with h5py.File(own, "r") as f:
            self.assertEqual(f.attrs["fsdp_layout_version"], truth_h5.FSDP_LAYOUT_VERSION)
            self.assertNotIn("truth", f)
        self.assertEqual(tuple(r["predicted"][k] for k in ("max_safe_mbs", "first_retry_mbs",
                                                            "first_oom_mbs")),
                         truth_compare.predicted_boundaries(sweep))
        self.assertEqual([x["mbs"] for x in r["points"]], [1, 5, 9, 10, 11, 13])
        by = {x["mbs"]: x for x in sweep["points"]}
        row = r["points"][0]
        self.assertEqual(row["predicted"]["peak_reserved_bytes"], by[1]["peak_reserved_bytes"])
        self.assertAlmostEqual(row["peak_reserved_rel_err"],
                               by[1]["peak_reserved_bytes"] / (300 * MiB) - 1)
        # Step time over the safe sizes 1, 5, 9 (12.05, 20.2, 29.85 ms) is 9.575 + 2.225 x mbs
        # (least squares); at 10 that is 31.825 ms against 35.1 measured.
        c = r["throughput_cliff"]
        self.assertEqual(c["mbs"], 10)
        self.assertAlmostEqual(c["expected_step_ms"], 31.825, places=9)
        self.assertAlmostEqual(c["measured_loss"], 1 - c["expected_step_ms"] / 35.1)
        self.assertIn("predicted_extra_alloc_ms_per_step", c)
        self.assertEqual([x["mbs"] for x in r["replays"]], [9, 10])
        rep = r["replays"][1]
        self.assertEqual(rep["measured"]["num_alloc_retries"], 1)
        self.assertEqual(rep["trace"]["segment_free"], 1)
        self.assertIn("num_alloc_retries", rep["replayed"])
        md = read(os.path.join(out, "comparison.md"))
        self.assertIn("| gpt2-tiny-e8 (gpt2-tiny, emulated 8, expandable_segments:False) |", md)
        self.assertIn(f"{sweep['max_safe_mbs'] or '-'} / 9", md)
        # The sweep's file now holds /truth beside /sweep, and plot.py draws both.
        with h5py.File(os.path.join(out, "gpt2-tiny-e8.h5"), "r") as f:
            self.assertIn("sweep", f)
            self.assertEqual(truth_h5.read_truth(f)["attrs"]["max_safe_mbs"], 9)
            self.assertEqual(f.attrs["fsdp_layout_version"], 2)
        plots = os.path.join(self.dir, "plots")
        p = subprocess.run([sys.executable, os.path.join(SRC, "scripts", "plot.py"),
                            os.path.join(out, "gpt2-tiny-e8.h5"), plots],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("fsdp_truth_gpt2-tiny-e8.png", p.stdout)

    def test_plan_of_the_gpu_matrix(self):
        """The committed GPU matrix, searched on the sweep's own answers: every configuration
        brackets its predicted boundaries exactly, in at most 60 points in all."""
        p = subprocess.run([sys.executable, os.path.join(VALIDATE, "truth_compare.py"), "--plan",
                            os.path.join(VALIDATE, "matrix_gpu.json"), "--fsdp",
                            os.environ["MLPRIO_FSDP"]], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        lines = p.stdout.splitlines()
        self.assertEqual(len(lines), 9, p.stdout)
        total = int(lines[-1].split()[0])
        self.assertLessEqual(total, 60, p.stdout)
        for line in lines[:-1]:
            self.assertNotIn("first_oom -", line)  # each range reaches the predicted OOM

    def test_replay_of_the_snapshot_agrees_on_its_own_budget(self):
        """The hand-made trace retries once on a 40 MiB budget: replay must count it."""
        fsdp = os.environ["MLPRIO_FSDP"]
        cfg = truth_config.load_matrix(text=matrix(dict(TINY, budget="40MiB")))[0]
        shutil.copy(os.path.join(DATA, "tiny_snapshot.pickle"), self.dir)
        measured = load_json(os.path.join(DATA, "memory_stats_gpt2xl_w1.json"))
        measured.update({"num_alloc_retries": 1, "num_ooms": 0, "segment.all.current": 3})
        errors = []
        r = truth_compare.compare_replay(fsdp, cfg, 40 * MiB, self.dir, self.dir, 10,
                                         {"file": "tiny_snapshot.pickle"}, measured, errors)
        self.assertEqual(errors, [])
        self.assertEqual((r["replayed"]["num_alloc_retries"], r["replayed"]["num_ooms"],
                          r["replayed"]["segment.all.current"], r["replayed"]["num_device_free"],
                          r["replayed"]["unmatched_frees"]), (1, 0, 3, 1, 0))
        self.assertEqual(r["measured"]["num_alloc_retries"], 1)
        # A snapshot that cannot be read fails its own replay, not the comparison.
        write(os.path.join(self.dir, "junk.pickle.gz"), b"\x1f\x8bnot gzip")
        r = truth_compare.compare_replay(fsdp, cfg, 40 * MiB, self.dir, self.dir, 11,
                                         {"file": "junk.pickle.gz"}, measured, errors)
        self.assertIn("not a readable gzip file", r["error"])
        self.assertEqual(errors, [])


if __name__ == "__main__":
    unittest.main()
