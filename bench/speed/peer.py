"""llama.cpp beside layerstream: the speed harness's peer (bench/speed/peer.go starts it).

Runs with a Python that has llama-cpp-python: loads one GGUF model, then answers JSON commands, one per line on
stdin, with one JSON line each on stdout (timings in seconds, measured here around llama_decode):

  {"op": "prefill", "ids": [...]}                       one batch of the prompt; {"secs": s}
  {"op": "decode", "ids": [...], "n": N}                the prompt, then N greedy tokens one at a time;
                                                        {"tok_s": (N-1) / time from the first token to the last}
  {"op": "batch", "prompts": [[...], ...], "n": N}      every prompt as its own sequence in one batch, then N
                                                        greedy tokens per sequence, one batch per step (the
                                                        low-level batch API); {"tok_s": all tokens / wall time,
                                                        "secs": wall time}

Each command starts from an empty KV cache.
"""
import ctypes
import json
import sys
import time

import numpy as np
import llama_cpp as L


@L.llama_log_callback
def log(level, text, user_data):
    if level == 3:  # GGML_LOG_LEVEL_ERROR; llama.cpp's info lines would bury the harness's
        sys.stderr.write(text.decode(errors="replace"))


def main():
    path, threads, n_ctx, n_seq = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    L.llama_log_set(log, ctypes.c_void_p())
    L.llama_backend_init()
    mp = L.llama_model_default_params()
    model = L.llama_model_load_from_file(path.encode(), mp)
    if not model:
        raise SystemExit(f"llama.cpp could not load {path}")
    cp = L.llama_context_default_params()
    cp.n_ctx = n_ctx
    cp.n_batch = n_ctx
    cp.n_ubatch = min(n_ctx, 512)
    cp.n_seq_max = n_seq
    cp.kv_unified = True  # the cache holds n_ctx positions in all, shared by the sequences
    cp.n_threads = threads
    cp.n_threads_batch = threads
    ctx = L.llama_init_from_model(model, cp)
    if not ctx:
        raise SystemExit("llama.cpp could not create a context")
    n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    batch = L.llama_batch_init(n_ctx, 0, n_seq)
    mem = L.llama_get_memory(ctx)

    def decode(tokens):  # tokens: (token, pos, seq, want_logits)
        batch.n_tokens = len(tokens)
        for i, (tok, pos, seq, logits) in enumerate(tokens):
            batch.token[i] = tok
            batch.pos[i] = pos
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq
            batch.logits[i] = 1 if logits else 0
        if L.llama_decode(ctx, batch) != 0:
            raise SystemExit("llama_decode failed")
        L.llama_synchronize(ctx)

    def greedy(i):
        p = L.llama_get_logits_ith(ctx, i)
        return int(np.argmax(np.ctypeslib.as_array(p, shape=(n_vocab,))))

    print(json.dumps({"ready": True, "n_vocab": n_vocab, "system": L.llama_print_system_info().decode()}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        L.llama_memory_clear(mem, True)
        op = cmd["op"]
        if op == "prefill":
            ids = cmd["ids"]
            start = time.perf_counter()
            decode([(t, i, 0, i == len(ids) - 1) for i, t in enumerate(ids)])
            out = {"secs": time.perf_counter() - start}
        elif op == "decode":
            ids, n = cmd["ids"], cmd["n"]
            decode([(t, i, 0, i == len(ids) - 1) for i, t in enumerate(ids)])
            tok, pos = greedy(len(ids) - 1), len(ids)
            gen = [tok]
            start = time.perf_counter()
            for _ in range(n - 1):
                decode([(tok, pos, 0, True)])
                tok, pos = greedy(0), pos + 1
                gen.append(tok)
            out = {"tok_s": (n - 1) / (time.perf_counter() - start), "ids": gen}
        elif op == "batch":
            prompts, n = cmd["prompts"], cmd["n"]
            start = time.perf_counter()
            toks, last = [], []
            for s, ids in enumerate(prompts):
                for i, t in enumerate(ids):
                    toks.append((t, i, s, i == len(ids) - 1))
                last.append(len(toks) - 1)
            decode(toks)
            cur = [greedy(i) for i in last]
            pos = [len(ids) for ids in prompts]
            for _ in range(n - 1):
                decode([(cur[s], pos[s], s, True) for s in range(len(prompts))])
                cur = [greedy(s) for s in range(len(prompts))]
                pos = [p + 1 for p in pos]
            secs = time.perf_counter() - start
            out = {"tok_s": len(prompts) * n / secs, "secs": secs}
        else:
            raise SystemExit(f"unknown op {op!r}")
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
