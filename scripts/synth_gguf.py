#!/usr/bin/env python3
"""A synthetic GGUF file for timing block types that `layerstream synth` does not write: the TinyLlama-1.1B shape
(22 layers, hidden 2048, feed-forward 5632, 32 query and 4 key/value heads) with the 512-token vocabulary and
metadata of gguf/testdata/tiny/tiny-llama-F32.gguf, every matrix random blocks of one type with sane float16
scales, the norms ones. The text it generates means nothing; layerstream and llama.cpp read and multiply it as
any file of that type (docs/performance.md, "GGUF files in the codebook i-quants").

    python3 scripts/synth_gguf.py IQ2_XXS /tmp/tinyllama-iq2_xxs.gguf

Needs gguf and numpy (pip install gguf numpy).
"""
import os
import sys

import numpy as np
import gguf

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
H, F, LAYERS, HEADS, KV_HEADS = 2048, 5632, 22, 32, 4


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    name, dst = sys.argv[1], sys.argv[2]
    qtype = gguf.GGMLQuantizationType[name]
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    src = gguf.GGUFReader(os.path.join(ROOT, "gguf", "testdata", "tiny", "tiny-llama-F32.gguf"))
    vocab = len(src.fields["tokenizer.ggml.tokens"].data)
    w = gguf.GGUFWriter(dst, "llama")
    shape = {"llama.embedding_length": H, "llama.feed_forward_length": F, "llama.block_count": LAYERS,
             "llama.attention.head_count": HEADS, "llama.attention.head_count_kv": KV_HEADS,
             "llama.rope.dimension_count": H // HEADS, "llama.context_length": 2048}
    for key, f in src.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        sub = f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(key, shape.get(key, f.contents()), f.types[0], sub_type=sub)
    rng = np.random.default_rng(0)

    def matrix(tname, rows, cols):
        raw = rng.integers(0, 256, size=(rows * cols // block, size), dtype=np.uint8)
        d = rng.uniform(0.0005, 0.002, size=len(raw)).astype(np.float16)
        if qtype == gguf.GGMLQuantizationType.IQ1_M:  # d is the top nibbles of the four uint16 scale words at 48
            dv, sc = d.view(np.uint16), raw[:, 48:56].copy().view(np.uint16)
            for i in range(4):
                sc[:, i] = (sc[:, i] & 0x0fff) | (((dv >> (4 * i)) & 0xf) << 12).astype(np.uint16)
            raw[:, 48:56] = sc.view(np.uint8)
        else:  # every other block type supported here starts with its float16 d
            raw[:, 0:2] = d.view(np.uint8).reshape(-1, 2)
        w.add_tensor(tname, raw.reshape(rows, -1), raw_shape=(rows, cols // block * size), raw_dtype=qtype)

    kv = KV_HEADS * H // HEADS
    matrix("token_embd.weight", vocab, H)
    for l in range(LAYERS):
        w.add_tensor(f"blk.{l}.attn_norm.weight", np.ones(H, np.float32))
        w.add_tensor(f"blk.{l}.ffn_norm.weight", np.ones(H, np.float32))
        for n, r, c in (("attn_q", H, H), ("attn_k", kv, H), ("attn_v", kv, H), ("attn_output", H, H),
                        ("ffn_gate", F, H), ("ffn_up", F, H), ("ffn_down", H, F)):
            matrix(f"blk.{l}.{n}.weight", r, c)
    w.add_tensor("output_norm.weight", np.ones(H, np.float32))
    matrix("output.weight", vocab, H)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {dst} ({os.path.getsize(dst)} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
