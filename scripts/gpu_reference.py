"""transformers' outputs for a checkpoint on a GPU, for scripts/gpu-check.sh (issue #38).

    python3 scripts/gpu_reference.py --model DIR --out FILE.safetensors [--dtype float32|bfloat16]
        [--device cuda|cpu] [--prompt-tokens 40] [--greedy 20] [--speed-tokens 64] [--json FILE]

Writes what `layerstream verify --reference FILE` reads (the format of testdata/hf/*/reference.safetensors):
input_ids int64 [T] (seeded random ids in [3, vocab)), logits float32 [T, vocab] (one forward pass in --dtype,
upcast), greedy_ids int64 [G] (generate, do_sample=False, KV cache). --json gets transformers' own decode rate
(tokens/s of generate with --speed-tokens new tokens after the prompt, the prompt's time excluded) and the times.
"""

import argparse
import json
import time

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--device", default="cuda")
    p.add_argument("--prompt-tokens", type=int, default=40)
    p.add_argument("--greedy", type=int, default=20)
    p.add_argument("--speed-tokens", type=int, default=64)
    p.add_argument("--json")
    a = p.parse_args()

    dtype = getattr(torch, a.dtype)
    t0 = time.time()
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=dtype, attn_implementation="eager").to(a.device).eval()
    load_s = time.time() - t0
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(1234)
    ids = torch.randint(3, vocab, (1, a.prompt_tokens), generator=g)
    x = ids.to(a.device)
    with torch.no_grad():
        logits = model(x).logits[0].float().cpu()
        out = model.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=a.greedy,
                             min_new_tokens=a.greedy, pad_token_id=0)
        greedy = out[0, a.prompt_tokens:].cpu()
        # Decode rate: generate of N tokens minus generate of 1 (the prompt's pass), synchronized.
        def timed(n):
            if a.device.startswith("cuda"):
                torch.cuda.synchronize()
            t = time.time()
            model.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=n,
                           min_new_tokens=n, pad_token_id=0)
            if a.device.startswith("cuda"):
                torch.cuda.synchronize()
            return time.time() - t
        timed(2)  # warm-up
        one, many = timed(1), timed(a.speed_tokens + 1)
    save_file({"input_ids": ids[0].to(torch.int64).contiguous(), "logits": logits.contiguous(),
               "greedy_ids": greedy.to(torch.int64).contiguous()}, a.out)
    rep = {"model": a.model, "dtype": a.dtype, "device": a.device, "load_s": load_s,
           "decode_tokens_per_s": a.speed_tokens / max(many - one, 1e-9), "prompt_tokens": a.prompt_tokens,
           "torch": torch.__version__}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rep, f, indent=1)
    print(json.dumps(rep))


if __name__ == "__main__":
    main()
