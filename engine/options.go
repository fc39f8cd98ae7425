package engine

import (
	"errors"
	"fmt"

	"github.com/layerstream/layerstream/guard"
	"github.com/layerstream/layerstream/hub"
	"github.com/layerstream/layerstream/internal/sections"
	"github.com/layerstream/layerstream/profiler"
)

// Options configure an Engine. The zero value streams decoder layers with the defaults below.
type Options struct {
	// Prefetch is how many units are read ahead of the one computing (host buffers in flight); default 2. On
	// the host-kernel path a streamed layer computes in place from its host buffer, so the pool holds one more.
	Prefetch int
	// MaxLayerBuffers bounds the decoder layers whose weights are on the device at once; default 2 (one
	// computing, one being transferred).
	MaxLayerBuffers int
	// DeviceBudget, when positive, sets MaxLayerBuffers to the number of decoder layers that fit in this many
	// bytes, each counted as the engine holds it (guard.HeldBytes: block-quantized matrices as their blocks and
	// bf16 matrices as bf16 on the host kernels' path, which reads them in place); an error when not even one fits.
	DeviceBudget int64
	// StreamAll streams the embedding, final norm and output projection too, instead of keeping them resident.
	StreamAll bool
	// Resident loads every unit once and keeps it (no streaming): for comparison and tests.
	Resident bool
	// MemoryBudget bounds the memory for decoder layers kept resident beside the stream (residency.go): as many
	// layers as it holds are loaded once, spread among the streamed ones, and never read again. A size in bytes,
	// MemoryBudgetAuto (0: when the model does not fit in memory, so that DirectIOAuto reads it with O_DIRECT,
	// nine tenths of the memory available, cgroup-aware, less the stream's buffers and a margin for the
	// key/value cache and the rest; none when DirectIO is forced, which asks for streaming) or MemoryBudgetOff.
	// A size applies where the shards are not mapped from the page cache (DirectIO, NoMap), which otherwise
	// keeps what fits itself.
	MemoryBudget int64
	// ExpertCache is the memory for routed experts kept between passes (experts.go) by ExpertPolicy, in bytes:
	// 0 (auto) takes half of the memory budget (MemoryBudget) where a mixture-of-experts model streams, leaving
	// the other half to resident layers; negative keeps none (each pass reads its experts again).
	ExpertCache int64
	// ExpertPolicy chooses which experts the cache evicts: ExpertLRU (the default, by measurement: see
	// docs/performance-log.md) or ExpertLFU.
	ExpertPolicy ExpertPolicy
	// WholeExperts makes the host kernels' passes read every expert of a streamed mixture-of-experts layer, as
	// the graphs do, instead of only those its rows were routed to: for comparison.
	WholeExperts bool
	// NoExpertPrefetch turns off reading ahead the experts predicted for the next streamed sparse layer (its
	// router applied to this layer's output; predict.go): its experts are then read only once routed to.
	NoExpertPrefetch bool
	// largerThanMemory: DirectIOAuto chose O_DIRECT, the shards not fitting in the memory available (Open).
	largerThanMemory bool
	// GraphDecode computes prompts and decode steps with the compiled GoMLX graphs instead of the host kernels (hostOps):
	// slower on cpu, for comparison and tests. Always on for the XLA devices, which compute every step on the
	// device.
	GraphDecode bool
	// DirectIO says when streamed shards are read with O_DIRECT, bypassing the page cache (shards.Set.SetDirectIO;
	// falls back with a warning where the filesystem refuses it): by default (DirectIOAuto) when they do not fit
	// in the memory available to the process.
	DirectIO DirectIOMode
	// NoMap reads streamed shards into the engine's buffers (shards.Set.Load) instead of mapping them
	// (shards.Set.Map, the default without DirectIO). Each shard file is mapped once and the mapping kept until
	// Close (shards.Set.SetKeepMapped): a streamed layer in the page cache then costs an open and a stat instead
	// of a copy of the whole layer (15 ms for a 88 MB TinyLlama layer on the 2-core VM), and the kernel still
	// manages the pages as page cache. A shard file truncated while mapped makes compute's reads fault: the
	// engine returns that as an error (guardMapped) where it reads weights; NoMap avoids mapping altogether.
	NoMap bool
	// NoPanels keeps the block-quantized matrices the host kernels hold resident in rows, as stored. By default
	// (false) the store packs them in 16-row panels (kernels.PackPanels, in place), where the CPU has the panel
	// kernels (Q4_K and Q6_K with AVX-512 VNNI): the decoder layers it keeps resident (Resident, or those a
	// memory budget holds) and, with Resident, the output projection. The bits are the same; on the 2-core VM a
	// one-row decode step costs 5-25% less and an 8-row pass 7-11% less than on rows (docs/performance-log.md,
	// issue 40).
	NoPanels bool
	// VerifyEveryLoad checksums a streamed shard on every load. By default (false) a shard is checksummed on its
	// first load and again only when its file changes (shards.VerifyOnce: same inode, size and times), which
	// saves a CRC pass over every layer on every token but trusts unchanged files not to rot between loads.
	VerifyEveryLoad bool
	// Device is DeviceCPU ("cpu", the default, pure Go), DeviceCUDA ("cuda") or DeviceXLACPU ("xla-cpu"); the
	// last two need a binary built with the xla build tag and a PJRT plugin (see README "CUDA and XLA").
	Device Device
	// NoSharedBuffers makes xla-cpu copy weights from host staging buffers into device buffers, as CUDA does,
	// instead of sharing host memory with the device: for testing and measuring the CUDA transfer path.
	NoSharedBuffers bool
	// ComputeCapability is the CUDA device's compute capability (e.g. 8.0) for the dtype policy, used when the
	// backend does not report it (go-xla v0.1.4 does not): 0 means unknown, and bf16 is then not chosen
	// automatically.
	ComputeCapability float64
	// DType is the compute dtype of weight matrices: "auto" (default), "f32" or "bf16", chosen by
	// guard.ChooseDType (auto is f32 for the graphs of the cpu backend, which computes bf16 slowly, by
	// emulation). The host kernels read f32 or bf16 matrices in their stored dtype and sum in f32; a bf16 matrix
	// multiplies activations rounded to bf16 under bf16, and under auto where the CPU has AVX512_BF16 (twice the
	// rate), else the products are exact (f32: always).
	DType DType
	// KVCache is how the key/value cache holds keys and values: "f32" (the default, except under Arithmetic
	// llama.cpp, where it is f16 as llama.cpp's own default) or "f16", which halves the
	// cache's memory (llama.cpp's default cache type) and rounds each key and value to float16 (a relative change
	// of at most 2⁻¹¹; one beyond ±65504 is clamped to it, with a warning). f16 is for the host kernels (cpu
	// without GraphDecode); the compiled graphs keep their cache in float32, and so does Logits over a whole
	// sequence of a model whose matrices are not block-quantized, which runs them (unless Arithmetic is
	// llama.cpp, which computes on the host kernels with this cache).
	KVCache KVCache
	// Arithmetic is how the host kernels round: ArithmeticEngine ("engine", the default) or ArithmeticLlamaCpp
	// ("llama.cpp"), every operation as llama.cpp's CPU backend computes it, bit for bit: its x86-64 build with
	// AVX-512 (the summation orders of its dot products, its exponential, the C library's sine and cosine), without
	// flash attention, with its cache as KVCache says (f16: llama.cpp's default and llama-cpp-python's default
	// settings; f32: -ctk f32 -ctv f32 -fa off). A GGUF file
	// then gives llama.cpp's logits and tokens exactly, on any CPU, which its own quantized arithmetic makes
	// impossible otherwise (a difference of one ulp anywhere flips the 8-bit rounding of some later product's
	// input). It is slower than the engine's kernels and covers what has been checked against llama.cpp: the
	// Llama, Qwen2, Qwen3, SmolLM3, OLMo 2 and Granite architectures (default, linear and frequency-factor
	// rotary embeddings, no sliding window) with float32, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K to Q6_K, the
	// codebook i-quants (IQ1_S to IQ3_S), IQ4_NL or IQ4_XS matrices (llama.cpp's K-quant and i-quant mixes included);
	// Open refuses anything else, naming it. It
	// needs the host kernels (device cpu without GraphDecode).
	Arithmetic Arithmetic
	// ObserveInputs, when set, is called with the input rows x (cols values each) of every matrix product and
	// the checkpoint name of its weight matrix, before the product (layerstream imatrix collects an importance
	// matrix with it). x is only valid during the call. It needs the host kernels (device cpu without
	// GraphDecode); Logits then runs on them too.
	ObserveInputs func(tensor string, x []float32, cols int)
	// Monitor, when set, checks the residual stream after every decoder layer and the logits of every step
	// (guard.Monitor.CheckActivations, CheckLogits) of requests that bring no Request.Monitor of their own: it
	// follows one sequence, so give concurrent requests their own. In strict mode a problem ends the sequence
	// with its error. Token text is the caller's: pass it to Monitor.ObserveToken from the onToken callback.
	// Logits that hold NaN or ±Inf end a sequence with an error, monitor or not: no token can be chosen from them.
	Monitor *guard.Monitor
	// Profiler records per-category timings; nil records nothing.
	Profiler *profiler.Profiler

	// Draft turns on speculative decoding (draft.go): DraftNgram ("ngram") drafts from the context itself (prompt
	// lookup), anything else is a model (as Open's model argument) with the target's vocabulary, kept resident,
	// whose greedy continuation is the draft. Each decode pass then verifies a sequence's last token and its
	// draft together; greedy output is the same with or without it. Needs the host kernels (device cpu without
	// GraphDecode) and the engine's arithmetic.
	Draft string
	// DraftTokens is the most draft tokens a pass verifies per sequence (Request.DraftTokens overrides it; at most
	// MaxDraftTokens); 0: DefaultDraftTokens for a model, DefaultNgramTokens for ngram.
	DraftTokens int
	// DraftLeaves makes a draft model's draft a tree: besides its chain of DraftTokens, up to this many of the
	// draft model's second choices at the chain's first positions, verified in the same pass (a leaf the target
	// chooses ends the step with one more token than the chain would have given). At most MaxDraftTokens.
	DraftLeaves int

	// PrefixCache keeps the keys and values of finished sequences in their rows of the batch loop's cache until
	// the rows are needed again, and gives a request whose prompt starts with ids a free row holds that row: only
	// the rest of its prompt is computed (Result.CachedPromptTokens), as a Session's next turn is — for chat turns
	// and shared system prompts across requests (serve). Reused positions were computed in another pass: with
	// block-quantized matrices or sliding-window layers their rounding may differ from computing the whole prompt,
	// as for a Session.
	PrefixCache bool

	// MaxBatch bounds the sequences the batch loop computes together (Generate, GenerateBatch); requests beyond
	// it wait in the queue and join as sequences end. 0: no bound.
	MaxBatch int
	// PrefillBudget bounds the prompt tokens one step of the batch loop computes while other sequences are
	// decoding (default DefaultPrefillBudget; negative: no bound): prompts joining a running batch are computed
	// in chunks, in the order they joined, and every step still decodes the running sequences, so a burst of
	// requests or a long prompt stalls them for a chunk's time rather than the whole prefill's. A prompt that
	// joins an idle batch is computed in one pass. Results do not depend on it (the host kernels compute a
	// chunked prompt's rows exactly as one pass would).
	PrefillBudget int

	// Hub configures resolving a Hugging Face repo id (revision, token, offline...).
	Hub hub.Options
	// ShardDir is where a checkpoint is split on first use; default shards.DefaultDir(checkpoint).
	ShardDir string
	// SplitProgress, when set, receives the progress of a first-use split.
	SplitProgress func(done, total int64)
}

// Check returns the error Open would refuse the options with (bad values, a device this binary lacks), before
// any download or split.
func (o Options) Check() error {
	if err := o.fillDefaults(); err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	return nil
}

func (o *Options) fillDefaults() error {
	if o.Prefetch == 0 {
		o.Prefetch = 2
	}
	if o.MaxLayerBuffers == 0 {
		o.MaxLayerBuffers = 2
	}
	if o.Prefetch < 1 {
		return fmt.Errorf("prefetch must be at least 1, got %d", o.Prefetch)
	}
	if o.MaxLayerBuffers < 1 {
		return fmt.Errorf("max layer buffers must be at least 1, got %d", o.MaxLayerBuffers)
	}
	if o.ExpertPolicy != "" {
		if _, err := ParseExpertPolicy(string(o.ExpertPolicy)); err != nil {
			return err
		}
	}
	if o.Resident && o.StreamAll {
		return errors.New("resident and stream-all exclude each other")
	}
	var err error
	if o.Device, err = checkDevice(o.Device); err != nil {
		return err
	}
	if o.Device != DeviceCPU {
		o.GraphDecode = true // the host kernels would compute on the CPU, not on the device
	}
	if o.DType == "" {
		o.DType = DTypeAuto
	}
	if err := o.checkArithmetic(); err != nil {
		return err
	}
	if err := o.checkKVCache(); err != nil {
		return err
	}
	if err := o.checkDraft(); err != nil {
		return err
	}
	if o.ObserveInputs != nil && o.GraphDecode {
		return fmt.Errorf("observing the inputs of the products (imatrix) needs the host kernels: --device cpu, without --graph-decode")
	}
	switch {
	case o.PrefillBudget == 0:
		o.PrefillBudget = DefaultPrefillBudget
	case o.PrefillBudget > 0 && o.PrefillBudget < prefillAlign:
		return fmt.Errorf("prefill budget must be at least %d tokens (or negative: no bound), got %d", prefillAlign, o.PrefillBudget)
	}
	return nil
}

// checkArithmetic resolves Options.Arithmetic ("" is engine).
func (o *Options) checkArithmetic() error {
	switch o.Arithmetic {
	case "":
		o.Arithmetic = ArithmeticEngine
	case ArithmeticEngine:
	case ArithmeticLlamaCpp:
		if o.GraphDecode {
			return fmt.Errorf("arithmetic (--arithmetic) %s needs the host kernels (device cpu without graph decode; see %s)", o.Arithmetic, sections.Anchor(sections.LlamaCpp))
		}
	default:
		return fmt.Errorf("arithmetic (--arithmetic) %q: want %s (the engine's kernels, the default) or %s", o.Arithmetic, ArithmeticEngine, ArithmeticLlamaCpp)
	}
	return nil
}

// The defaults of Options.DraftTokens. Measured on the real Qwen2.5-Coder pair, the 1.5B streamed with O_DIRECT
// and the 0.5B as draft, greedy, 96 tokens of two prompts: chains of 6 gave 6.0-6.4 tokens per pass, of 10 8.7
// (0.039-0.040 s/token against 0.047-0.075), and 3-4 leaves beside them nothing more (the draft already agrees
// on ~90% of its tokens). On a model that fits in memory a longer draft costs more compute per pass.
const (
	DefaultDraftTokens = 10
	DefaultNgramTokens = 8
)

// checkDraft validates Options.Draft and resolves DraftTokens.
func (o *Options) checkDraft() error {
	switch {
	case o.Draft == "" && (o.DraftTokens != 0 || o.DraftLeaves != 0):
		return fmt.Errorf("draft tokens (--draft-tokens %d, --draft-leaves %d) without a draft (--draft MODEL or ngram)", o.DraftTokens, o.DraftLeaves)
	case o.DraftLeaves < 0 || o.DraftLeaves > MaxDraftTokens:
		return fmt.Errorf("draft leaves (--draft-leaves) must be in [0, %d], got %d", MaxDraftTokens, o.DraftLeaves)
	case o.DraftLeaves > 0 && o.Draft == DraftNgram:
		return errors.New("draft leaves (--draft-leaves) need a draft model's second choices: --draft ngram drafts a chain")
	case o.Draft == "":
		return nil
	case o.DraftTokens < 0 || o.DraftTokens > MaxDraftTokens:
		return fmt.Errorf("draft tokens (--draft-tokens) must be in [1, %d], got %d", MaxDraftTokens, o.DraftTokens)
	case o.GraphDecode:
		return fmt.Errorf("speculative decoding (--draft) needs the host kernels (device cpu without graph decode): it verifies a draft in one pass computed bit for bit as decode steps (see %s)", sections.Anchor(sections.Draft))
	case o.Arithmetic == ArithmeticLlamaCpp:
		return fmt.Errorf("speculative decoding (--draft) with arithmetic %s: llama.cpp computes a pass of several tokens in other roundings than one token, so a draft would change its tokens (see %s)", ArithmeticLlamaCpp, sections.Anchor(sections.Draft))
	case o.DraftTokens == 0 && o.Draft == DraftNgram:
		o.DraftTokens = DefaultNgramTokens
	case o.DraftTokens == 0:
		o.DraftTokens = DefaultDraftTokens
	}
	return nil
}

// checkKVCache resolves Options.KVCache: "" is f16 under Arithmetic llama.cpp (llama.cpp's default cache, whose
// logits that arithmetic reproduces), else f32.
func (o *Options) checkKVCache() error {
	switch o.KVCache {
	case "":
		o.KVCache = KVCacheF32
		if o.Arithmetic == ArithmeticLlamaCpp {
			o.KVCache = KVCacheF16
		}
	case KVCacheF32:
	case KVCacheF16:
		if o.GraphDecode {
			return fmt.Errorf("kv cache (--kv-cache) %q needs the host kernels (device cpu without graph decode): the compiled graphs keep their cache in float32", o.KVCache)
		}
	default:
		return fmt.Errorf("kv cache (--kv-cache) %q: want %s or %s", o.KVCache, KVCacheF32, KVCacheF16)
	}
	return nil
}

// Device is a compute device (Options.Device): DeviceCPU, DeviceCUDA or DeviceXLACPU. As a flag.Value it takes
// the name; Open checks it.
type Device string

// Devices (Options.Device).
const (
	// DeviceCPU is the pure-Go simplego backend, in every build.
	DeviceCPU Device = "cpu"
	// DeviceCUDA is an NVIDIA GPU through XLA's PJRT CUDA plugin (pjrt_c_api_cuda_plugin.so); needs the xla
	// build tag.
	DeviceCUDA Device = "cuda"
	// DeviceXLACPU is XLA's PJRT CPU plugin (pjrt_c_api_cpu_plugin.so): the code path CUDA takes (XLA-compiled
	// graphs for every step), runnable and testable without a GPU; needs the xla build tag.
	DeviceXLACPU Device = "xla-cpu"
)

// DType is the requested compute dtype of weight matrices (Options.DType): DTypeAuto, DTypeF32 or DTypeBF16
// (guard.ChooseDType reads it, and refuses others by name).
type DType string

// The values of Options.DType.
const (
	DTypeAuto DType = "auto"
	DTypeF32  DType = "f32"
	DTypeBF16 DType = "bf16"
)

// KVCache is how the key/value cache holds keys and values (Options.KVCache).
type KVCache string

// The values of Options.KVCache.
const (
	KVCacheF32 KVCache = "f32"
	KVCacheF16 KVCache = "f16"
)

// Arithmetic is how the host kernels round (Options.Arithmetic).
type Arithmetic string

// The values of Options.Arithmetic.
const (
	ArithmeticEngine   Arithmetic = "engine"
	ArithmeticLlamaCpp Arithmetic = "llama.cpp"
)

// The option types are flag.Values: Set stores the text, which Open (Options.Check) validates.

func (d Device) String() string      { return string(d) }
func (d *Device) Set(s string) error { *d = Device(s); return nil }

func (d DType) String() string      { return string(d) }
func (d *DType) Set(s string) error { *d = DType(s); return nil }

func (k KVCache) String() string      { return string(k) }
func (k *KVCache) Set(s string) error { *k = KVCache(s); return nil }

func (a Arithmetic) String() string      { return string(a) }
func (a *Arithmetic) Set(s string) error { *a = Arithmetic(s); return nil }

// DefaultPrefillBudget is Options.PrefillBudget's default: prompt tokens per step beside decoding sequences.
const DefaultPrefillBudget = 64
