#!/usr/bin/env python3
"""llama.cpp's prefill and decode rates on a GGUF file, with the settings of `layerstream bench --resident
--prompt-tokens 64 --new-tokens N --runs 3` (2 threads, no flash attention, a float16 cache unless f32 is asked):
per run, one 64-token batch, then N single-token evals; prints the runs' tokens/s.

    python3 scripts/llamacpp_bench.py FILE.gguf [--new-tokens 32] [--threads 2] [--f32-cache]

--prompt-tokens sets the prompt's length; --json prints one JSON object instead: the runs' prefill and decode
tokens/s and the median seconds per decoded token (s_per_token), as `layerstream bench --json` reports them
(scripts/speed_moe_llamacpp.sh). --no-repack is llama.cpp's own --no-repack (llama_model_params.use_extra_bufts
off): by default llama.cpp copies the matrices its CPU kernels prefer repacked (Q4_K as q4_K_8x8, experts
included) out of the mapped file into its own memory, so the model must fit in memory; without repacking every
weight is read from the mapped file, page by page.

Needs llama-cpp-python and numpy (pip install llama-cpp-python numpy).
"""
import argparse
import json
import statistics
import time

import llama_cpp


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--f32-cache", action="store_true")
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-repack", action="store_true")
    a = ap.parse_args()
    if a.no_repack:
        default_params = llama_cpp.llama_cpp.llama_model_default_params

        def no_repack():
            p = default_params()
            p.use_extra_bufts = False
            return p

        llama_cpp.llama_cpp.llama_model_default_params = no_repack  # what llama_cpp.Llama starts its model parameters from
    n_ctx = max(512, a.prompt_tokens + a.new_tokens)
    kw = dict(n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx, n_threads=a.threads, n_threads_batch=a.threads, verbose=False,
              flash_attn=False)
    if a.f32_cache:
        kw.update(type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32)
    llm = llama_cpp.Llama(model_path=a.model, **kw)
    vocab = llm.n_vocab()
    prompt = [100 + i % (vocab - 100) for i in range(a.prompt_tokens)]
    prefill, decode = [], []
    for _ in range(a.runs):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(prompt)
        t1 = time.perf_counter()
        for i in range(a.new_tokens):
            llm.eval([(200 + i) % vocab])
        t2 = time.perf_counter()
        prefill.append(a.prompt_tokens / (t1 - t0))
        decode.append(a.new_tokens / (t2 - t1))
    if a.json:
        print(json.dumps({"prefill_tok_s": prefill, "decode_tok_s": decode, "s_per_token": 1 / statistics.median(decode)}))
        return
    print("prefill tok/s", sorted(round(v) for v in prefill), "decode tok/s", sorted(round(v, 1) for v in decode))


if __name__ == "__main__":
    main()
