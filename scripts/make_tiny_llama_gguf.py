#!/usr/bin/python3
"""Writes a tiny llama-architecture GGUF model for the tests labelled `llama`.

Random weights (seeded), a few layers of small width, and a real tokenizer copied whole (every
tokenizer.* key) from one of llama.cpp's tokenizer-only files (models/ggml-vocab-*.gguf). The
model knows nothing, but llama-server loads it, tokenizes with the real vocabulary, samples and
enforces a response_format grammar on it exactly as for a real model; its answers are noise
(the tests check their validity and bounds, never their content). The output projection is
tied to the token embedding (llama.cpp reuses token_embd.weight when output.weight is absent).
With Qwen2's 151936-token vocabulary, whose chat template marks turns with the special tokens
<|im_start|> and <|im_end|> (so a job script that writes them is a real test), the file is about
16 MB, 6 MB of it the tokenizer. Needs llama.cpp's gguf-py on PYTHONPATH and numpy
(scripts/llama-server-build sets both up).

    make_tiny_llama_gguf.py --vocab ggml-vocab-qwen2.gguf --out tiny.gguf
"""
import argparse
import sys

import numpy as np

try:
    import gguf
except ImportError:
    sys.exit("make_tiny_llama_gguf.py: gguf-py not found; put llama.cpp's gguf-py on PYTHONPATH")

N_EMBD = 32
N_HEAD = 2
N_LAYER = 2
N_FF = 64
N_CTX_TRAIN = 16384


def copy_tokenizer(reader, writer):
    """Copies every tokenizer.* key with its stored type; returns the vocabulary size."""
    n_vocab = 0
    for name, field in reader.fields.items():
        if not name.startswith("tokenizer."):
            continue
        main = field.types[0]
        if main == gguf.GGUFValueType.ARRAY:
            values = field.contents()
            writer.add_key_value(name, values, main, sub_type=field.types[-1])
            if name == "tokenizer.ggml.tokens":
                n_vocab = len(values)
        else:
            writer.add_key_value(name, field.contents(), main)
    if n_vocab == 0:
        sys.exit("make_tiny_llama_gguf.py: the vocabulary file has no tokenizer.ggml.tokens")
    return n_vocab


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", required=True, help="a tokenizer-only GGUF (models/ggml-vocab-*.gguf)")
    ap.add_argument("--out", required=True, help="the model file to write")
    ap.add_argument("--seed", type=int, default=20260)
    args = ap.parse_args()

    reader = gguf.GGUFReader(args.vocab)
    writer = gguf.GGUFWriter(args.out, "llama")
    n_vocab = copy_tokenizer(reader, writer)

    writer.add_name("mlprio tiny test model (random weights)")
    writer.add_context_length(N_CTX_TRAIN)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(N_EMBD // N_HEAD)
    writer.add_rope_freq_base(10000.0)
    writer.add_vocab_size(n_vocab)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)

    rng = np.random.default_rng(args.seed)

    def weight(rows, cols):  # numpy (rows, cols) is ggml's ne = [cols, rows]
        return (rng.standard_normal((rows, cols)) * 0.02).astype(np.float16)

    def norm():
        return np.ones(N_EMBD, dtype=np.float32)

    writer.add_tensor("token_embd.weight", weight(n_vocab, N_EMBD))
    writer.add_tensor("output_norm.weight", norm())
    for i in range(N_LAYER):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", norm())
        writer.add_tensor(f"blk.{i}.attn_q.weight", weight(N_EMBD, N_EMBD))
        writer.add_tensor(f"blk.{i}.attn_k.weight", weight(N_EMBD, N_EMBD))
        writer.add_tensor(f"blk.{i}.attn_v.weight", weight(N_EMBD, N_EMBD))
        writer.add_tensor(f"blk.{i}.attn_output.weight", weight(N_EMBD, N_EMBD))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", norm())
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", weight(N_FF, N_EMBD))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", weight(N_FF, N_EMBD))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", weight(N_EMBD, N_FF))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"wrote {args.out}: llama, {N_LAYER} layers, n_embd {N_EMBD}, vocabulary {n_vocab}")


if __name__ == "__main__":
    main()
