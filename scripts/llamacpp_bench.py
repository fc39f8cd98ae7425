#!/usr/bin/env python3
"""llama.cpp's prefill and decode rates on a GGUF file, with the settings of `layerstream bench --resident
--prompt-tokens 64 --new-tokens N --runs 3` (2 threads, no flash attention, a float16 cache unless f32 is asked):
per run, one 64-token batch, then N single-token evals; prints the runs' tokens/s.

    python3 scripts/llamacpp_bench.py FILE.gguf [--new-tokens 32] [--threads 2] [--f32-cache]

Needs llama-cpp-python and numpy (pip install llama-cpp-python numpy).
"""
import argparse
import time

import llama_cpp


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--f32-cache", action="store_true")
    a = ap.parse_args()
    kw = dict(n_ctx=512, n_batch=512, n_ubatch=512, n_threads=a.threads, n_threads_batch=a.threads, verbose=False,
              flash_attn=False)
    if a.f32_cache:
        kw.update(type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32)
    llm = llama_cpp.Llama(model_path=a.model, **kw)
    vocab = llm.n_vocab()
    prompt = [100 + i % (vocab - 100) for i in range(64)]
    prefill, decode = [], []
    for _ in range(a.runs):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(prompt)
        t1 = time.perf_counter()
        for i in range(a.new_tokens):
            llm.eval([(200 + i) % vocab])
        t2 = time.perf_counter()
        prefill.append(64 / (t1 - t0))
        decode.append(a.new_tokens / (t2 - t1))
    print("prefill tok/s", sorted(round(v) for v in prefill), "decode tok/s", sorted(round(v, 1) for v in decode))


if __name__ == "__main__":
    main()
