"""Configurations of the ground-truth runs: what one real FSDP2 training configuration is, how a
matrix file of them is read and checked, and how each maps to `mlprio-fsdp sweep` flags and to
the PYTORCH_CUDA_ALLOC_CONF of the process that measures it. Pure Python (no torch), so the
harness, the comparison and the tests share one reading of a configuration.

Matrix file (JSON, `format` "mlprio-fsdp-truth-matrix", `version` 1):

    {"format": "mlprio-fsdp-truth-matrix", "version": 1,
     "defaults": {"budget": "60GiB", "steps": 3},
     "configs": [{"name": "gpt2xl-w1-malloc", "model": "gpt2-xl", "world_size": 1,
                  "ranks": "real", "alloc_conf": "expandable_segments:False",
                  "mbs": "1:24", "coarse_step": 4}]}

Each configuration is its defaults overlaid by its own keys; unknown keys are errors that name
the configuration and the key."""
import json
import re
from dataclasses import asdict, dataclass, field

MATRIX_FORMAT = "mlprio-fsdp-truth-matrix"
MATRIX_VERSION = 1
MAX_MBS = 4096  # the sweep's bound on points, also the largest minibatch a search may try
MAX_STEPS = 100
MAX_WORLD_SIZE = 4096
MAX_SEQ_LEN = 1 << 20
MAX_REAL_RANKS = 16  # real ranks are GPUs of one node

# Shapes the harness can build with random weights from a transformers config (no download).
# `dims` are the transformers config keyword arguments; `sim_model` is the name `mlprio-fsdp`
# knows the same shape by (built in, or in truth_models.json beside this file).
MODELS = {
    "gpt2-xl": {
        "family": "gpt2", "sim_model": "gpt2-xl", "seq_len": 1024, "tgt_len": 0,
        "dims": {"n_layer": 48, "n_embd": 1600, "n_head": 25, "vocab_size": 50257,
                 "n_positions": 1024},
    },
    "t5-3b": {
        "family": "t5", "sim_model": "t5-3b", "seq_len": 512, "tgt_len": 128,
        "dims": {"d_model": 1024, "d_kv": 128, "d_ff": 16384, "num_layers": 24,
                 "num_decoder_layers": 24, "num_heads": 32, "vocab_size": 32128,
                 "feed_forward_proj": "relu"},
    },
    "llama2-7b": {
        "family": "llama", "sim_model": "llama2-7b", "seq_len": 4096, "tgt_len": 0,
        "dims": {"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                 "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000,
                 "max_position_embeddings": 4096, "tie_word_embeddings": False},
    },
    # Two layers of GPT-2 width 256: a seconds-long smoke run of the whole path on any GPU.
    "gpt2-tiny": {
        "family": "gpt2", "sim_model": "gpt2-tiny", "seq_len": 128, "tgt_len": 0,
        "dims": {"n_layer": 2, "n_embd": 256, "n_head": 4, "vocab_size": 50257,
                 "n_positions": 128},
    },
}

UNITS = {"": 1, "b": 1, "kib": 1 << 10, "ki": 1 << 10, "mib": 1 << 20, "mi": 1 << 20,
         "gib": 1 << 30, "gi": 1 << 30, "tib": 1 << 40, "ti": 1 << 40, "kb": 10**3, "k": 10**3,
         "mb": 10**6, "m": 10**6, "gb": 10**9, "g": 10**9, "tb": 10**12, "t": 10**12}
MAX_BYTES = 1 << 50  # 1 PiB, the profiler's bound on sizes


class ConfigError(ValueError):
    """A matrix file or configuration that cannot be used; the message names where and why."""


def parse_bytes(text, where="size"):
    """'60GiB', '40GB', '512MiB' or a plain number of bytes, as `mlprio-fsdp` reads sizes."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
    if not m or m.group(2).lower() not in UNITS:
        raise ConfigError(f"{where}: bad size '{text}': expected a size such as 80GiB, 40GB, "
                          "512MiB or 4096 (bytes)")
    value = int(float(m.group(1)) * UNITS[m.group(2).lower()])
    if not 0 < value <= MAX_BYTES:
        raise ConfigError(f"{where}: size '{text}' must be more than 0 and at most 1 PiB")
    return value


def parse_range(text, where="mbs"):
    """'LO:HI' -> (lo, hi) with 1 <= lo <= hi <= MAX_MBS."""
    m = re.fullmatch(r"([0-9]+):([0-9]+)", str(text).strip())
    if not m:
        raise ConfigError(f"{where}: expected LO:HI with 1 <= LO <= HI, e.g. 1:32 (got '{text}')")
    lo, hi = int(m.group(1)), int(m.group(2))
    if not 1 <= lo <= hi <= MAX_MBS:
        raise ConfigError(f"{where}: expected 1 <= LO <= HI <= {MAX_MBS} (got '{text}')")
    return lo, hi


@dataclass
class TruthConfig:
    name: str
    model: str
    seq_len: int = 0          # 0: the model's
    tgt_len: int = 0          # decoder tokens of T5; 0: the model's
    world_size: int = 1
    ranks: str = "real"       # real: world_size GPUs of this node, one process each (torchrun
                              # when more than one); emulated: rank 0 of world_size on one GPU
                              # over a fake process group
    precision: str = "bf16"   # bf16: MixedPrecisionPolicy(param_dtype=bf16), so gradients are
                              # reduced in bf16 too, as the sweep's FSDP2 generator assumes
    activation_checkpointing: bool = False
    attention: str = "eager"  # eager, or sdpa (the sweep's --flash-attention)
    alloc_conf: str = ""      # PYTORCH_CUDA_ALLOC_CONF of the measuring process
    budget_bytes: int = 60 << 30  # set_per_process_memory_fraction(budget / total memory)
    mbs_lo: int = 1
    mbs_hi: int = 16
    coarse_step: int = 4      # first pass over the range, then bisection at each boundary
    steps: int = 3
    snapshots: bool = True    # memory snapshots of the last safe and the first bad minibatch
    point_timeout_s: int = 120
    extra: dict = field(default_factory=dict)  # free-form notes carried into the output

    @property
    def spec(self):
        return MODELS[self.model]

    @property
    def effective_seq_len(self):
        return self.seq_len or self.spec["seq_len"]

    @property
    def effective_tgt_len(self):
        return (self.tgt_len or self.spec["tgt_len"]) if self.spec["family"] == "t5" else 0

    def to_json(self):
        return json.dumps(asdict(self), sort_keys=True)

    @staticmethod
    def from_json(text):
        d = json.loads(text)
        return make_config(d, "config")

    def alloc_env(self):
        """The environment the measuring process needs before CUDA starts."""
        return {"PYTORCH_CUDA_ALLOC_CONF": self.alloc_conf} if self.alloc_conf else {}

    def sweep_argv(self, binary, mbs_lo, mbs_hi, capacity_bytes=None, models_file=None):
        """`mlprio-fsdp sweep` of this configuration over [mbs_lo, mbs_hi], every size, past the
        first OOM (measured points may lie beyond the predicted one), as JSON."""
        argv = [binary, "sweep", "--model", self.spec["sim_model"],
                "--world-size", str(self.world_size),
                "--capacity", str(capacity_bytes or self.budget_bytes),
                "--mbs", f"{mbs_lo}:{mbs_hi}", "--steps", str(self.steps), "--fsdp", "2",
                "--sharding", "FULL_SHARD", "--precision", self.precision,
                "--seq-len", str(self.effective_seq_len), "--past-oom", "--json"]
        if self.effective_tgt_len:
            argv += ["--tgt-len", str(self.effective_tgt_len)]
        if self.alloc_conf:
            argv += ["--alloc-conf", self.alloc_conf]
        if self.activation_checkpointing:
            argv.append("--activation-checkpointing")
        if self.attention == "sdpa":
            argv.append("--flash-attention")
        if models_file:
            argv += ["--models-file", models_file]
        return argv


FIELDS = {"name", "model", "seq_len", "tgt_len", "world_size", "ranks", "precision",
          "activation_checkpointing", "attention", "alloc_conf", "budget", "budget_bytes", "mbs",
          "mbs_lo", "mbs_hi", "coarse_step", "steps", "snapshots", "point_timeout_s", "extra"}


def _int(d, key, where, lo, hi, default):
    v = d.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise ConfigError(f"{where}.{key}: expected an integer from {lo} to {hi} (got {v!r})")
    return v


def _choice(d, key, where, choices, default):
    v = d.get(key, default)
    if v not in choices:
        raise ConfigError(f"{where}.{key}: expected one of {', '.join(choices)} (got {v!r})")
    return v


def make_config(d, where):
    """One configuration from a dict (defaults already merged); errors name `where` and the key."""
    if not isinstance(d, dict):
        raise ConfigError(f"{where}: expected an object with \"name\" and \"model\"")
    name = d.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", name):
        raise ConfigError(f"{where}.name: expected 1-64 characters of letters, digits, '_', '.', "
                          f"'-' (it names output files), got {name!r}")
    where = f"{where} ({name})"
    unknown = sorted(set(d) - FIELDS)
    if unknown:
        raise ConfigError(f"{where}: unknown key '{unknown[0]}'; known: {', '.join(sorted(FIELDS))}")
    model = _choice(d, "model", where, list(MODELS), None)
    if "budget" in d:
        budget = parse_bytes(d["budget"], f"{where}.budget")
    else:
        budget = _int(d, "budget_bytes", where, 1, MAX_BYTES, 60 << 30)
    if "mbs" in d:
        lo, hi = parse_range(d["mbs"], f"{where}.mbs")
    else:
        lo = _int(d, "mbs_lo", where, 1, MAX_MBS, 1)
        hi = _int(d, "mbs_hi", where, lo, MAX_MBS, max(lo, 16))
    alloc_conf = d.get("alloc_conf", "")
    if not isinstance(alloc_conf, str) or "\n" in alloc_conf:
        raise ConfigError(f"{where}.alloc_conf: expected a PYTORCH_CUDA_ALLOC_CONF string such "
                          "as expandable_segments:True")
    for key in ("activation_checkpointing", "snapshots"):
        if key in d and not isinstance(d[key], bool):
            raise ConfigError(f"{where}.{key}: expected true or false (got {d[key]!r})")
    extra = d.get("extra", {})
    if not isinstance(extra, dict):
        raise ConfigError(f"{where}.extra: expected an object")
    c = TruthConfig(
        name=name, model=model,
        seq_len=_int(d, "seq_len", where, 0, MAX_SEQ_LEN, 0),
        tgt_len=_int(d, "tgt_len", where, 0, MAX_SEQ_LEN, 0),
        world_size=_int(d, "world_size", where, 1, MAX_WORLD_SIZE, 1),
        ranks=_choice(d, "ranks", where, ["real", "emulated"], "real"),
        precision=_choice(d, "precision", where, ["bf16", "fp32"], "bf16"),
        activation_checkpointing=d.get("activation_checkpointing", False),
        attention=_choice(d, "attention", where, ["eager", "sdpa"], "eager"),
        alloc_conf=alloc_conf, budget_bytes=budget, mbs_lo=lo, mbs_hi=hi,
        coarse_step=_int(d, "coarse_step", where, 1, MAX_MBS, 4),
        steps=_int(d, "steps", where, 2, MAX_STEPS, 3),
        snapshots=d.get("snapshots", True),
        point_timeout_s=_int(d, "point_timeout_s", where, 1, 3600, 120),
        extra=extra)
    if c.ranks == "real" and c.world_size > MAX_REAL_RANKS:
        raise ConfigError(f"{where}.world_size: real ranks are one process per GPU of this node "
                          f"(torchrun), at most {MAX_REAL_RANKS}; use \"ranks\": \"emulated\" "
                          "for rank 0's memory of a larger job on one GPU")
    return c


def load_matrix(path=None, text=None):
    """The configurations of a matrix file, defaults applied, names unique."""
    src = path or "matrix"
    if text is None:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{src}: not JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != MATRIX_FORMAT:
        raise ConfigError(f"{src}: expected {{\"format\": \"{MATRIX_FORMAT}\", \"version\": "
                          f"{MATRIX_VERSION}, \"configs\": [...]}}")
    if doc.get("version") != MATRIX_VERSION:
        raise ConfigError(f"{src}: version {doc.get('version')!r}; this reader knows "
                          f"{MATRIX_VERSION}")
    defaults = doc.get("defaults", {})
    configs = doc.get("configs")
    if not isinstance(defaults, dict) or not isinstance(configs, list) or not configs:
        raise ConfigError(f"{src}: \"defaults\" must be an object and \"configs\" a non-empty "
                          "list of objects")
    out, seen = [], set()
    for i, c in enumerate(configs):
        if not isinstance(c, dict):
            raise ConfigError(f"{src}: configs[{i}]: expected an object")
        cfg = make_config({**defaults, **c}, f"{src}: configs[{i}]")
        if cfg.name in seen:
            raise ConfigError(f"{src}: configs[{i}].name: '{cfg.name}' appears twice")
        seen.add(cfg.name)
        out.append(cfg)
    return out
