"""Generates the cross-check cases in this folder with Hugging Face's reference implementation.

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install tokenizers==0.23.3
    /tmp/venv/bin/python gen.py /path/to/shared/models

Two small base tokenizers (a byte-level one cut from Qwen3's vocabulary, a SentencePiece-style one from
stories260K) are combined with component variants the shared real tokenizers do not exercise; for each variant the
reference encodes and decodes a fixed set of texts. TestCrossCheck replays them.
"""
import copy, json, random, sys
from tokenizers import Tokenizer
import tokenizers

models = sys.argv[1]
random.seed(11)

def byte_level_base(n_merges=1500):
    q = json.load(open(f"{models}/tokenizers/qwen3/tokenizer.json"))
    m = q["model"]
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b); cs.append(256 + n); n += 1
    vocab = {chr(c): i for i, c in enumerate(sorted(cs))}
    merges = []
    for a, b in m["merges"]:
        if len(merges) == n_merges:
            break
        if a in vocab and b in vocab:
            merges.append([a, b])
            vocab.setdefault(a + b, len(vocab))
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
            "pre_tokenizer": None, "post_processor": None, "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": vocab, "merges": merges}}

def metaspace_base():
    return json.load(open(f"{models}/stories260K-hf/tokenizer.json"))

def added(base, toks):
    out = []
    for i, (content, opts) in enumerate(toks):
        t = {"id": len(base["model"]["vocab"]) + i, "content": content, "single_word": False, "lstrip": False,
             "rstrip": False, "normalized": False, "special": True}
        t.update(opts)
        out.append(t)
    return out

BL = byte_level_base()
MS = metaspace_base()
split = lambda pattern, behavior="Isolated", invert=False, regex=True: {
    "type": "Split", "pattern": {"Regex" if regex else "String": pattern}, "behavior": behavior, "invert": invert}
bytelevel = lambda prefix=False, regex=True: {"type": "ByteLevel", "add_prefix_space": prefix, "trim_offsets": True, "use_regex": regex}
seq = lambda *p: {"type": "Sequence", "pretokenizers": list(p)}
LLAMA3 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"

variants = {
    "gpt2": (BL, {"pre_tokenizer": bytelevel()}),
    "gpt2-prefix-space": (BL, {"pre_tokenizer": bytelevel(prefix=True)}),
    "llama3": (BL, {"pre_tokenizer": seq(split(LLAMA3), bytelevel(regex=False)), "model.ignore_merges": True,
                    "added_tokens": added(BL, [("<|begin_of_text|>", {}), ("<|eot_id|>", {})]),
                    "post_processor": {"type": "TemplateProcessing",
                                       "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                                       "pair": [{"Sequence": {"id": "A", "type_id": 0}}],
                                       "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [len(BL["model"]["vocab"])], "tokens": ["<|begin_of_text|>"]}}}}),
    "regex-behaviors": (BL, {"pre_tokenizer": seq(split(r"\d+", "MergedWithPrevious"), split(r"\s+", "MergedWithNext"),
                                                  split(r"[aeiou]", "Contiguous"), split("x", "Removed", regex=False),
                                                  split(r"\p{P}+", "Isolated", invert=True), bytelevel(regex=False))}),
    "normalizers": (BL, {"normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKD"}, {"type": "StripAccents"},
                                                                            {"type": "Lowercase"}, {"type": "Strip", "strip_left": True, "strip_right": True},
                                                                            {"type": "Replace", "pattern": {"Regex": r"\s+"}, "content": " "}]},
                         "pre_tokenizer": bytelevel()}),
    "added-options": (BL, {"pre_tokenizer": bytelevel(),
                           "added_tokens": added(BL, [("<L>", {"lstrip": True}), ("<R>", {"rstrip": True}),
                                                      ("<LR>", {"lstrip": True, "rstrip": True}),
                                                      ("word", {"single_word": True, "special": False}),
                                                      ("Mixed", {"normalized": True, "special": False})]),
                           "normalizer": {"type": "Lowercase"}}),
    "metaspace-first": (MS, {"normalizer": None, "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}}),
    "metaspace-always-split": (MS, {"normalizer": None,
                                    "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True},
                                    "decoder": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}}),
    "metaspace-never": (MS, {"normalizer": None,
                             "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never", "split": True},
                             "decoder": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never", "split": True}}),
    "whitespace-digits": (MS, {"normalizer": None, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "WhitespaceSplit"}, {"type": "Digits", "individual_digits": True}, {"type": "Punctuation", "behavior": "Isolated"}]},
        "decoder": None}),
    "whitespace": (MS, {"normalizer": None, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None,
                        "decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": "a", "start": 2, "stop": 0}]}}),
}

alphabet = list("aAeExX1 2\t\n\r's.,!?(_-é中🙂") + ["\u00a0", "ﬁ", "Å", "word", "Word", "MIXED", "Mixed", "<L>", "<R>", "<LR>",
                                                   "<|begin_of_text|>", "<|eot_id|>", "<s>", "  ", "'ll", "123456", "▁"]
texts = ["", " ", "Hello world", " Hello  world ", "Once upon a time, there was a little girl.", "a word in words, word!",
         "x <L> y<R> z <LR> w", "It's 2024: 1234567 apples.\n\nDone"] + \
        ["".join(random.choice(alphabet) for _ in range(random.randint(1, 12))) for _ in range(150)]

def write_variant(name, base, over, texts, n_decode):
    """Encodes and decodes texts (and n_decode random id lists) with base + over, into name.json."""
    tj = copy.deepcopy(base)
    for k, v in over.items():
        if k.startswith("model."):
            tj["model"][k[6:]] = v
        else:
            tj[k] = v
    tok = Tokenizer.from_str(json.dumps(tj))
    cases = []
    for t in texts:
        ids = tok.encode(t, add_special_tokens=True).ids
        cases.append({"text": t, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False),
                      "decoded_skip": tok.decode(ids, skip_special_tokens=True)})
    n = tok.get_vocab_size(with_added_tokens=True)
    dec = []
    for _ in range(n_decode):
        ids = [random.randrange(n) for _ in range(random.randint(1, 6))]
        dec.append({"ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False),
                    "decoded_skip": tok.decode(ids, skip_special_tokens=True)})
    base_name = "bytelevel" if base is BL else "metaspace"
    json.dump({"reference": f"tokenizers {tokenizers.__version__} (Python, Rust core)", "base": base_name,
               "override": over, "cases": cases, "decode": dec},
              open(f"{name}.json", "w"), ensure_ascii=False, separators=(",", ":"))

for name, (base, over) in variants.items():
    write_variant(name, base, over, texts, 60)
json.dump(BL, open("base-bytelevel.json", "w"), ensure_ascii=False)
json.dump(MS, open("base-metaspace.json", "w"), ensure_ascii=False)
print("wrote", len(variants), "variants")

# The shared real tokenizers on tricky texts (TestCrossCheckReal loads them from the shared folder).
real_alphabet = alphabet + ["<|im_start|>", "<|im_end|>", "<think>", "</s>", "<unk>", "ſ", "İ", "\u3000", "\u2028", "\u0085",
                            "日本", "\U0001F3FD", "\u200d", "Ⅻ", "１２", "'S", "\r\n"]
real_texts = ["".join(random.choice(real_alphabet) for _ in range(random.randint(1, 14))) for _ in range(200)]
for name, path in [("stories260K", "stories260K-hf"), ("llama2-32k", "tokenizers/llama2-32k"), ("qwen3", "tokenizers/qwen3")]:
    tok = Tokenizer.from_file(f"{models}/{path}/tokenizer.json")
    cases = []
    for t in real_texts:
        ids = tok.encode(t, add_special_tokens=True).ids
        cases.append({"text": t, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False),
                      "decoded_skip": tok.decode(ids, skip_special_tokens=True)})
    json.dump({"reference": f"tokenizers {tokenizers.__version__} (Python, Rust core)", "tokenizer": path, "cases": cases},
              open(f"real-{name}.json", "w"), ensure_ascii=False, separators=(",", ":"))
print("wrote the real-tokenizer cases")

# Bytes missing from a byte-level vocabulary (SmolLM2's lacks 0x04, 0x06, 0x13, 0x14, 0x16, 0x1D, ...): the
# reference drops such a byte (no unk_token), or maps it to unk_token (fused with fuse_unk). The base's vocabulary
# and merges without the byte-level characters of three control bytes, with their own random texts.
rng = random.Random(13)
def without_bytes(base, missing):
    tj = copy.deepcopy(base)
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b); cs.append(256 + n); n += 1
    gone = {chr(cs[bs.index(b)]) for b in missing}
    m = tj["model"]
    m["merges"] = [p for p in m["merges"] if not any(ch in gone for ch in "".join(p))]
    kept = [t for t, _ in sorted(m["vocab"].items(), key=lambda kv: kv[1]) if not any(ch in gone for ch in t)]
    m["vocab"] = {t: i for i, t in enumerate(kept + ["<unk>"])}
    return m["vocab"], m["merges"]
mv, mm = without_bytes(BL, [0x04, 0x13, 0x14])
missing_variants = {
    "bytelevel-missing": {"pre_tokenizer": bytelevel(), "model.vocab": mv, "model.merges": mm},
    "bytelevel-missing-unk": {"pre_tokenizer": bytelevel(), "model.vocab": mv, "model.merges": mm, "model.unk_token": "<unk>"},
    "bytelevel-missing-fused": {"pre_tokenizer": bytelevel(), "model.vocab": mv, "model.merges": mm, "model.unk_token": "<unk>", "model.fuse_unk": True},
}
missing_alphabet = list("ab !?\n") + ["\x04", "\x13", "\x14", "\x05", "é", "🙂", "!!", "  "]
missing_texts = ["\x14", "a\x14b", "!\x14!", "hello \x14 world", "x\x13\x14y", "\x14\n", "!\x04\x13\x14?"] + \
    ["".join(rng.choice(missing_alphabet) for _ in range(rng.randint(1, 10))) for _ in range(60)]
for name, over in missing_variants.items():
    write_variant(name, BL, over, missing_texts, 0)
print("wrote", len(missing_variants), "missing-byte variants")
