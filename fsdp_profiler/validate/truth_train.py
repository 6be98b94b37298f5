"""The torch side of the ground-truth runs: builds a transformers model of a configuration with
random weights (on the meta device, no download), shards every transformer block and the root
with FSDP2 (`fully_shard`), and trains `steps` steps of one minibatch size while reading
`torch.cuda.memory_stats()` after each step. Imported only by the measuring child process
(truth_harness.py), after PYTORCH_CUDA_ALLOC_CONF is set and before CUDA starts.

World sizes: "real" is one rank per GPU over NCCL (world size 1 in this process, or N processes
that torchrun started, one per GPU: RANK, WORLD_SIZE, LOCAL_RANK); "emulated" is rank 0 of N on
one GPU over torch's fake process group, whose collectives move no data but whose buffers FSDP2
allocates exactly as on N ranks (all-gather outputs N shards long, reduce-scatter inputs whole),
so rank 0's allocator sees what it would see in an N-GPU job. Values computed under a fake group
are meaningless (gathers are not filled); memory and the allocator's decisions are not."""
import gc
import gzip
import os
import pickle
import socket
import time

import torch
import torch.distributed as dist

MAX_TRACE_ENTRIES = 4_000_000


def _fake_store():
    try:
        from torch.testing._internal.distributed.fake_pg import FakeStore  # registers "fake"
        return FakeStore()
    except ImportError:
        return dist.HashStore()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank():
    """This process's rank (torchrun's RANK; 0 alone or emulated)."""
    return int(os.environ.get("RANK", "0"))


def _select_device():
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    return torch.cuda.current_device()


def init_distributed(cfg):
    """The process group and the 1-D device mesh FSDP2 shards over."""
    from torch.distributed.device_mesh import init_device_mesh
    dev = _select_device()
    if not dist.is_initialized():
        if cfg.ranks == "emulated":
            store = _fake_store()
            dist.init_process_group("fake", store=store, rank=0, world_size=cfg.world_size)
        else:
            launched = int(os.environ.get("WORLD_SIZE", "1"))
            if launched != cfg.world_size:
                raise RuntimeError(f"world_size {cfg.world_size} with real ranks needs as many "
                                   f"processes (torchrun); this one is 1 of {launched}")
            os.environ.setdefault("RANK", "0")
            os.environ.setdefault("WORLD_SIZE", "1")
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", str(_free_port()))
            dist.init_process_group("nccl", device_id=torch.device("cuda", dev))
    return init_device_mesh("cuda", (cfg.world_size,))


def agree(cfg, level):
    """The largest level over the real ranks, so that every rank takes the same next size."""
    if cfg.ranks != "real" or cfg.world_size == 1:
        return level
    t = torch.tensor([level], device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def _hf_config(cfg):
    import transformers
    spec = cfg.spec
    kw = dict(spec["dims"], use_cache=False, attn_implementation=cfg.attention)
    if spec["family"] == "gpt2":
        kw["n_positions"] = max(kw["n_positions"], cfg.effective_seq_len)
        c = transformers.GPT2Config(**kw)
    elif spec["family"] == "t5":
        c = transformers.T5Config(**kw)
    else:
        kw["max_position_embeddings"] = max(kw["max_position_embeddings"], cfg.effective_seq_len)
        c = transformers.LlamaConfig(**kw)
    try:
        c._attn_implementation = cfg.attention  # versions that ignore the keyword
    except AttributeError:
        pass
    return c


def _model_class(family):
    import transformers
    return {"gpt2": transformers.GPT2LMHeadModel, "t5": transformers.T5ForConditionalGeneration,
            "llama": transformers.LlamaForCausalLM}[family]


def _blocks(model, family):
    if family == "gpt2":
        return list(model.transformer.h)
    if family == "t5":
        return list(model.encoder.block) + list(model.decoder.block)
    return list(model.model.layers)


def _reset_buffers(model, family):
    """to_empty() leaves buffers uninitialised: recompute the few these models have. Their
    values change the numbers a step computes, not what it allocates, so a transformers version
    whose rotary module looks different is reported and run with the buffer as it is."""
    with torch.no_grad():
        for m in model.modules():
            if hasattr(m, "inv_freq") and hasattr(m, "rope_init_fn"):
                try:
                    inv_freq, scaling = m.rope_init_fn(m.config, torch.device("cuda"))
                    m.inv_freq.copy_(inv_freq)
                    if hasattr(m, "original_inv_freq"):
                        m.original_inv_freq = inv_freq
                    m.attention_scaling = scaling
                except Exception as e:  # noqa: BLE001 -- any API difference: values only
                    print(f"truth_train: rotary buffer not recomputed ({e})", flush=True)
            for name, b in m.named_buffers(recurse=False):
                if name == "bias" and b.dtype == torch.bool:  # older GPT-2 causal masks
                    n = b.shape[-1]
                    b.copy_(torch.tril(torch.ones(n, n, dtype=torch.bool, device=b.device))
                            .view_as(b))
                elif name == "masked_bias":
                    b.fill_(-1e4)


def build(cfg, mesh):
    """The sharded model and its optimizer; the parameter shards are allocated here, on the GPU,
    after the caller reset the allocator's statistics (the sweep's initialisation)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    family = cfg.spec["family"]
    with torch.device("meta"):
        model = _model_class(family)(_hf_config(cfg))
    if cfg.activation_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16) if cfg.precision == "bf16" else None
    kw = {"mesh": mesh}
    if mp is not None:
        kw["mp_policy"] = mp
    # Blocks reshard after forward (FULL_SHARD); the root keeps its parameters (embeddings, final
    # norm, LM head) gathered from forward to the end of backward, FSDP2's default for the root
    # and the step generator's unit 0.
    for block in _blocks(model, family):
        fully_shard(block, reshard_after_forward=True, **kw)
    fully_shard(model, **kw)
    model.to_empty(device="cuda")
    # to_empty() gives each module its own new tensor, which unties GPT-2's and T5's output
    # embedding from the input one: tie them again, so that one sharded tensor serves both.
    if getattr(model.config, "tie_word_embeddings", False):
        model.tie_weights()
    with torch.no_grad():
        for p in model.parameters():
            local = p.to_local() if hasattr(p, "to_local") else p
            local.normal_(0.0, 0.02)
    _reset_buffers(model, family)
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-5, foreach=True)
    return model, opt


def _batch(cfg, mbs, vocab):
    s = cfg.effective_seq_len
    ids = torch.randint(0, vocab, (mbs, s), device="cuda")
    if cfg.spec["family"] == "t5":
        return {"input_ids": ids,
                "labels": torch.randint(0, vocab, (mbs, cfg.effective_tgt_len), device="cuda")}
    return {"input_ids": ids, "labels": ids}


def device_info():
    import transformers
    p = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {"name": p.name, "total_memory_bytes": int(p.total_memory),
            "torch_version": torch.__version__, "cuda_version": str(torch.version.cuda),
            "transformers_version": transformers.__version__, "hostname": socket.gethostname(),
            "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")}


def set_budget(cfg):
    """Caps the caching allocator at the configuration's budget; returns the bytes it allows."""
    dev = _select_device()
    total = torch.cuda.get_device_properties(dev).total_memory
    if cfg.budget_bytes > total:
        raise RuntimeError(f"budget {cfg.budget_bytes} bytes is more than the GPU's {total}")
    fraction = cfg.budget_bytes / total
    torch.cuda.set_per_process_memory_fraction(fraction, dev)
    return int(fraction * total)  # as the allocator computes its limit


def _flat_stats():
    return {k: int(v) for k, v in torch.cuda.memory_stats().items()
            if isinstance(v, int) and not isinstance(v, bool)}


def _train_step(model, opt, batch):
    """One step; its tensors die with this frame, also when it ends in an OOM."""
    model(**batch).loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()


def run_point(cfg, mesh, mbs, snapshot_path=None):
    """One minibatch size: a fresh model and optimizer on an emptied cache, `cfg.steps` steps.
    Returns the point dict of truth_h5 (its snapshot written to `snapshot_path`, gzip'd)."""
    gc.collect()
    torch.cuda.synchronize()
    if hasattr(torch._C, "_cuda_clearCublasWorkspaces"):  # else they outlive empty_cache()
        torch._C._cuda_clearCublasWorkspaces()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.reset_accumulated_memory_stats()
    if snapshot_path:
        torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                                 max_entries=MAX_TRACE_ENTRIES,
                                                 clear_history=True)
    torch.manual_seed(mbs)  # the same token ids for a minibatch size in every run
    t_start = time.perf_counter()
    point = {"mbs": mbs, "oom": False, "oom_step": -1, "step_retries": [], "step_ms": [],
             "step_reserved_bytes": [], "step_allocated_peak_bytes": []}
    model = opt = None
    try:
        model, opt = build(cfg, mesh)
        vocab = cfg.spec["dims"]["vocab_size"]
        retries_before = _flat_stats().get("num_alloc_retries", 0)
        for step in range(cfg.steps):
            t0 = time.perf_counter()
            try:
                _train_step(model, opt, _batch(cfg, mbs, vocab))
            except torch.OutOfMemoryError as e:
                point["oom"], point["oom_step"] = True, step
                point["oom_message"] = str(e).splitlines()[0][:400]
                break
            st = _flat_stats()
            point["step_ms"].append((time.perf_counter() - t0) * 1000.0)
            point["step_retries"].append(st.get("num_alloc_retries", 0) - retries_before)
            retries_before = st.get("num_alloc_retries", 0)
            point["step_reserved_bytes"].append(st.get("reserved_bytes.all.current", 0))
            point["step_allocated_peak_bytes"].append(st.get("allocated_bytes.all.peak", 0))
    except torch.OutOfMemoryError as e:  # while the shards or Adam's state were allocated
        point["oom"], point["oom_step"] = True, -1
        point["oom_message"] = str(e).splitlines()[0][:400]
    finally:
        torch.cuda.synchronize()
        point["memory_stats"] = _flat_stats()
        if snapshot_path:
            snap = torch.cuda.memory._snapshot()
            torch.cuda.memory._record_memory_history(enabled=None)
            with gzip.open(snapshot_path, "wb", compresslevel=3) as f:
                pickle.dump(snap, f)
            point["snapshot"] = os.path.basename(snapshot_path)
            del snap
        del model, opt
        gc.collect()
        torch.cuda.empty_cache()
    r = point["step_retries"]
    point["first_step_retries"] = r[0] if r else 0
    point["retries_per_step"] = sum(r[1:]) / len(r[1:]) if len(r) > 1 else 0.0
    point["wall_s"] = time.perf_counter() - t_start
    return point

