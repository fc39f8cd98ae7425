#!/usr/bin/env python3
"""A GGUF file llama.cpp reads, made from a Hugging Face checkpoint folder such as `layerstream synth` writes
(a synthetic model of a real shape, e.g. `synth --shape qwen3-30b-a3b --layers 4`), for timing llama.cpp and
layerstream on the same file (scripts/speed_moe_llamacpp.sh).

llama.cpp's own convert_hf_to_gguf.py converts the checkpoint to bf16 (its vocabulary replaced by a byte-level
BPE one of the config's vocab_size, as scripts/fixtures/gguf_families.py does for the fixtures: the converter
insists on a tokenizer it recognizes, and the tokens' texts play no part in timing), then llama.cpp's
llama_model_quantize makes the requested type (Q4_K_M by default: Q4_K and Q6_K matrices, experts included), and
the bf16 intermediate is deleted.

    /work/venvs/llama/bin/python scripts/checkpoint_to_gguf.py CHECKPOINT OUT.gguf [--type Q4_K_M]

Needs llama-cpp-python here; the conversion runs in $TF_PYTHON (torch, transformers; default
/work/venvs/tf5/bin/python) with the converter of the llama-cpp-python sdist ($LLAMA_CPP_SRC, the unpacked sdist;
downloaded with pip when unset).
"""
import argparse
import os
import subprocess
import sys

import llama_cpp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
import gguf_families as fam  # noqa: E402

# Runs in the torch venv: argv = converter, checkpoint, output file. The vocabulary: the 256 byte symbols, then
# fillers up to vocab_size, one merge (llama.cpp requires merges).
CONVERT = r'''
import os, runpy, sys
conv, src, dst = sys.argv[1:4]
sys.path.insert(0, os.path.dirname(conv))
sys.path.insert(1, os.path.join(os.path.dirname(conv), "gguf-py"))
import gguf
import conversion

def set_vocab(self):
    vocab = self.hparams.get("vocab_size") or self.hparams["text_config"]["vocab_size"]
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + list(range(ord("\xae"), ord("\xff") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    sym = [chr(c) for _, c in sorted(zip(bs, cs))]
    tokens = sym + [f"<|synth_{i}|>" for i in range(256, vocab)]
    tokens[min(vocab, 256) - 1] = sym[32] * 2
    w = self.gguf_writer
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens[:vocab])
    w.add_token_types([gguf.TokenType.NORMAL] * vocab)
    w.add_token_merges([sym[32] + " " + sym[32]])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)

get_model_class = conversion.get_model_class
def patched(*args, **kwargs):
    cls = get_model_class(*args, **kwargs)
    cls.set_vocab = set_vocab
    return cls
conversion.get_model_class = patched
sys.argv = [conv, src, "--outtype", "bf16", "--outfile", dst, "--model-name", "layerstream synthetic"]
runpy.run_path(conv, run_name="__main__")
'''


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint")
    ap.add_argument("out")
    ap.add_argument("--type", default="Q4_K_M", help="llama.cpp's file type (LLAMA_FTYPE_MOSTLY_<TYPE>): Q4_K_M, Q8_0, ...")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    ftype = getattr(llama_cpp, "LLAMA_FTYPE_MOSTLY_" + a.type.upper(), None)
    if ftype is None:
        sys.exit(f"--type {a.type}: llama_cpp has no LLAMA_FTYPE_MOSTLY_{a.type.upper()}")
    bf16 = a.out + ".bf16.tmp"
    r = subprocess.run([fam.TF_PYTHON, "-c", CONVERT, fam.converter(), a.checkpoint, bf16], stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        print(r.stderr[-4000:], file=sys.stderr)
        sys.exit(f"{a.checkpoint}: llama.cpp's converter failed (above)")
    try:
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype, params.nthread = ftype, a.threads
        if llama_cpp.llama_model_quantize(bf16.encode(), (a.out + ".tmp").encode(), params) != 0:
            sys.exit(f"{bf16}: llama_model_quantize to {a.type} failed")
        os.replace(a.out + ".tmp", a.out)
    finally:
        os.remove(bf16)
    print(f"wrote {a.out} ({os.path.getsize(a.out)} bytes, {a.type})", file=sys.stderr)


if __name__ == "__main__":
    main()
