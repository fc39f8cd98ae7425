package main

import (
	"errors"
	"flag"
	"fmt"
	"strconv"

	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/internal/bytesize"
	"github.com/layerstream/layerstream/internal/sections"
)

// addEngineFlags defines the flags that configure an engine (device, dtype, streaming budget, Hub access) on fs,
// writing into o. generate, bench and verify share them.
//
// Hub settings left empty are filled from the environment by hub.Resolve ($HF_TOKEN, $HF_ENDPOINT...): the
// token's default stays empty here so that --help never prints a secret.
func addEngineFlags(fs *flag.FlagSet, o *engine.Options) {
	o.Device = engine.DeviceCPU
	fs.Var(&o.Device, "device", "compute device: cpu (pure Go), cuda or xla-cpu (XLA through a PJRT plugin: a binary built with -tags xla; see README 'CUDA and XLA')")
	addDTypeFlags(fs, o)
	fs.BoolVar(&o.NoSharedBuffers, "no-shared-buffers", false, "xla-cpu: copy weights into device buffers as CUDA does instead of sharing host memory (to measure the transfer path)")
	fs.Var(&o.KVCache, "kv-cache", "how the key/value cache holds keys and values: f32, or f16 (half the memory, llama.cpp's default; each key and value rounded to float16; cpu without --graph-decode); default f32, or f16 with --arithmetic llama.cpp")
	o.Arithmetic = engine.ArithmeticEngine
	fs.Var(&o.Arithmetic, "arithmetic", "how the host kernels round: engine, or llama.cpp (llama.cpp's CPU arithmetic bit for bit, as llama.cpp without flash attention computes on x86-64 with AVX-512, its cache as --kv-cache says, f16 by default as llama.cpp's: the same logits and tokens from a GGUF file; Llama, Qwen2/3, SmolLM3, OLMo 2 and Granite with f32, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K-Q6_K, IQ1_S-IQ3_S, IQ4_NL or IQ4_XS matrices, the K-quant and i-quant mixes included; see README 'Matching llama.cpp exactly')")
	o.Prefetch, o.MaxLayerBuffers = 2, 2
	fs.Var(positiveInt{&o.Prefetch}, "prefetch", "`n` units read from disk ahead of the one computing (at least 1)")
	fs.Var(positiveInt{&o.MaxLayerBuffers}, "max-layer-buffers", "`n` decoder layers whose weights are on the device at once (at least 1)")
	fs.Var(byteSize{&o.DeviceBudget}, "device-budget", "device memory for streamed layer weights, a `size` such as 8GiB, 512MB or a number of bytes (overrides --max-layer-buffers)")
	fs.BoolVar(&o.StreamAll, "stream-all", false, "stream the embedding, final norm and lm_head too instead of keeping them resident")
	fs.BoolVar(&o.Resident, "resident", false, "load every layer once and keep it (no streaming)")
	fs.BoolVar(&o.NoPanels, "no-panels", false, "cpu: keep the resident Q4_K and Q6_K matrices in rows as stored, not packed in 16-row panels for the AVX-512 VNNI kernels (the default where the CPU has them: the same output, decode and verification passes faster)")
	fs.Var(memoryBudget{&o.MemoryBudget}, "memory-budget", "memory for decoder layers kept resident beside the stream when reading past the page cache (--direct-io, --no-mmap): a `size` such as 12GiB, auto (the default: nine tenths of the memory available, cgroup-aware, less the stream's buffers and a margin, when the model does not fit in memory) or off")
	fs.Var(memoryBudget{&o.ExpertCache}, "expert-cache", "mixture-of-experts models: memory for routed experts kept between tokens (the streamed layers read only the experts their tokens were routed to): a `size`, auto (the default: half of --memory-budget) or off")
	fs.Func("expert-cache-policy", "which experts the expert cache evicts: lru (the default: least recently used) or lfu (least frequently used)", func(s string) error {
		p, err := engine.ParseExpertPolicy(s)
		o.ExpertPolicy = p
		return err
	})
	fs.BoolVar(&o.NoExpertPrefetch, "no-expert-prefetch", false, "mixture-of-experts models: do not read ahead the experts predicted for the next layer (its router applied to this layer's output)")
	fs.BoolVar(&o.WholeExperts, "whole-experts", false, "mixture-of-experts models: read every expert of a streamed layer, not only those its tokens were routed to (for comparison)")
	fs.Var(&o.DirectIO, "direct-io", "read shards with O_DIRECT, bypassing the page cache: auto (the default: when they do not fit in the memory available), true or false (--direct-io alone: true)")
	fs.BoolVar(&o.NoMap, "no-mmap", false, "read streamed shards into buffers instead of mapping them from the page cache (mapping saves a copy per layer; see TROUBLESHOOTING.md '"+sections.SIGBUS+"')")
	fs.BoolVar(&o.VerifyEveryLoad, "verify-every-load", false, "checksum every streamed shard on every load (default: on first load, and again when the file changes)")
	fs.StringVar(&o.Draft, "draft", "", "speculative decoding: `MODEL`, a smaller model with the same tokenizer (kept resident; its greedy continuation is the draft), or ngram (drafts from the context itself); each pass then verifies several tokens, greedy output unchanged (cpu, without --graph-decode)")
	fs.IntVar(&o.DraftTokens, "draft-tokens", 0, fmt.Sprintf("the most draft tokens a pass verifies per sequence, 1-%d (default %d with a draft model, %d with ngram)", engine.MaxDraftTokens, engine.DefaultDraftTokens, engine.DefaultNgramTokens))
	fs.IntVar(&o.DraftLeaves, "draft-leaves", 0, "with a draft model, up to `n` of its second choices at the draft's first positions, verified in the same pass as a tree (0: a chain)")
	fs.BoolVar(&o.GraphDecode, "graph-decode", false, "compute decode steps with GoMLX graphs instead of the host kernels (slower; for comparison)")
	fs.StringVar(&o.Hub.Revision, "revision", "", "Hub revision (branch, tag or commit) for a repo id (default main)")
	fs.StringVar(&o.Hub.Token, "token", "", "Hugging Face token for gated repos (default $HF_TOKEN, then $HF_HOME/token)")
	fs.BoolVar(&o.Hub.Offline, "offline", false, "use only the local Hugging Face cache (also $HF_HUB_OFFLINE=1)")
}

// addDTypeFlags defines --dtype and --compute-capability, from which the engine chooses the compute dtype on its
// device (engine.ChooseDType): the engine's commands and placement share them.
func addDTypeFlags(fs *flag.FlagSet, o *engine.Options) {
	fs.Float64Var(&o.ComputeCapability, "compute-capability", 0, "CUDA compute capability of the GPU (e.g. 8.0 A100, 9.0 H100) for the dtype policy: bf16 is chosen automatically only at 8.0 or newer")
	o.DType = engine.DTypeAuto
	fs.Var(&o.DType, "dtype", "compute dtype of weight matrices: auto, f32 or bf16")
}

// positiveInt is an int flag that refuses values below 1 by name. The engine takes a zero in its Options as
// "the default", so a plain IntVar would run an explicit --prefetch 0 with two units read ahead.
type positiveInt struct{ p *int }

func (v positiveInt) String() string {
	if v.p == nil {
		return ""
	}
	return strconv.Itoa(*v.p)
}

func (v positiveInt) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return errors.New("not a whole number")
	}
	if n < 1 {
		return fmt.Errorf("must be at least 1, got %d", n)
	}
	*v.p = n
	return nil
}

// byteSize is a flag holding a byte count written with an optional unit (bytesize.Parse).
type byteSize struct{ p *int64 }

func (b byteSize) String() string {
	if b.p == nil || *b.p == 0 {
		return ""
	}
	return strconv.FormatInt(*b.p, 10)
}

func (b byteSize) Set(s string) error {
	n, err := bytesize.Parse(s)
	if err != nil {
		return err
	}
	*b.p = n
	return nil
}

// memoryBudget is --memory-budget: auto, off, or a byte count (engine.Options.MemoryBudget).
type memoryBudget struct{ p *int64 }

func (m memoryBudget) String() string {
	switch {
	case m.p == nil || *m.p == engine.MemoryBudgetAuto:
		return "auto"
	case *m.p == engine.MemoryBudgetOff:
		return "off"
	}
	return strconv.FormatInt(*m.p, 10)
}

func (m memoryBudget) Set(s string) error {
	switch s {
	case "auto":
		*m.p = engine.MemoryBudgetAuto
		return nil
	case "off", "0":
		*m.p = engine.MemoryBudgetOff
		return nil
	}
	n, err := bytesize.Parse(s)
	if err != nil {
		return fmt.Errorf("want auto, off or a size: %w", err)
	}
	if n == 0 {
		n = engine.MemoryBudgetOff // "0GiB" as "0": no layer kept
	}
	*m.p = n
	return nil
}
