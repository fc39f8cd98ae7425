#!/usr/bin/env python3
"""A synthetic GGUF file for timing block types that `layerstream synth` does not write: a real model's shape
(tinyllama-1.1b: 22 layers, hidden 2048, feed-forward 5632, 32/4 heads; llama3-70b: 80 layers, hidden 8192,
feed-forward 28672, 64/8 heads) with the 512-token vocabulary and metadata of
gguf/testdata/tiny/tiny-llama-F32.gguf (so the embedding and the head are small: 0.6% of a real Llama 3 70B's
bytes in its own vocabulary of 128256), every matrix random blocks of one type with sane float16 scales, the
norms ones. The text it generates means nothing; layerstream and llama.cpp read and multiply it as any file of
that type (docs/performance-log.md, "GGUF files in the codebook i-quants"). Tensors are written one at a time, so a
70B file needs no more memory than its largest matrix.

    python3 scripts/synth_gguf.py [--shape tinyllama-1.1b|llama3-70b] IQ2_XXS /tmp/tinyllama-iq2_xxs.gguf

Needs gguf and numpy (pip install gguf numpy).
"""
import argparse
import os
import sys

import numpy as np
import gguf

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts", "fixtures"))
from ggml_blocks import HALF_OFFSETS, put_iq1m_d  # noqa: E402
SHAPES = {  # layers, hidden, feed-forward, query heads, key/value heads
    "tinyllama-1.1b": (22, 2048, 5632, 32, 4),
    "llama3-70b": (80, 8192, 28672, 64, 8),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="tinyllama-1.1b")
    ap.add_argument("type", choices=sorted(HALF_OFFSETS), help="the block type of every matrix")
    ap.add_argument("out")
    a = ap.parse_args()
    layers, hidden, ffn, heads, kv_heads = SHAPES[a.shape]
    qtype = gguf.GGMLQuantizationType[a.type]
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    src = gguf.GGUFReader(os.path.join(ROOT, "gguf", "testdata", "tiny", "tiny-llama-F32.gguf"))
    vocab = len(src.fields["tokenizer.ggml.tokens"].data)
    w = gguf.GGUFWriter(a.out, "llama")
    shape = {"llama.embedding_length": hidden, "llama.feed_forward_length": ffn, "llama.block_count": layers,
             "llama.attention.head_count": heads, "llama.attention.head_count_kv": kv_heads,
             "llama.rope.dimension_count": hidden // heads, "llama.attention.key_length": hidden // heads,
             "llama.attention.value_length": hidden // heads, "llama.context_length": 2048}
    for key, f in src.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        sub = f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(key, shape.get(key, f.contents()), f.types[0], sub_type=sub)

    kv = kv_heads * hidden // heads
    tensors = [("token_embd.weight", vocab, hidden)]
    for l in range(layers):
        tensors += [(f"blk.{l}.attn_norm.weight", 0, hidden), (f"blk.{l}.ffn_norm.weight", 0, hidden)]
        tensors += [(f"blk.{l}.{n}.weight", r, c) for n, r, c in (
            ("attn_q", hidden, hidden), ("attn_k", kv, hidden), ("attn_v", kv, hidden), ("attn_output", hidden, hidden),
            ("ffn_gate", ffn, hidden), ("ffn_up", ffn, hidden), ("ffn_down", hidden, ffn))]
    tensors += [("output_norm.weight", 0, hidden), ("output.weight", vocab, hidden)]
    for name, rows, cols in tensors:  # rows 0: a norm (float32 ones)
        if rows == 0:
            w.add_tensor_info(name, (cols,), np.dtype(np.float32), 4 * cols)
        else:
            w.add_tensor_info(name, (rows, cols // block * size), np.dtype(np.uint8), rows * cols // block * size, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(0)
    for name, rows, cols in tensors:
        if rows == 0:
            w.write_tensor_data(np.ones(cols, np.float32))
            continue
        raw = rng.integers(0, 256, size=(rows * cols // block, size), dtype=np.uint8)
        d = rng.uniform(0.0005, 0.002, size=len(raw)).astype(np.float16)
        if qtype == gguf.GGMLQuantizationType.IQ1_M:
            put_iq1m_d(raw, d)
        for off in HALF_OFFSETS[a.type]:
            raw[:, off:off + 2] = d.view(np.uint8).reshape(-1, 2)
        w.write_tensor_data(raw.reshape(rows, -1))
    w.close()
    print(f"wrote {a.out} ({os.path.getsize(a.out)} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
