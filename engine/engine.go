// Package engine is the layer-streaming generator: it runs a decoder-only transformer whose weights do not fit
// in memory by streaming them through the device one unit (embedding, decoder layer, final norm, output
// projection) at a time.
//
// The pipeline is prefetch → transfer → compute → release (stream.go); each architecture is one small file
// (engine/model) written once against model.Ops. On cpu, generation runs it on the host (hostOps: parallel Go kernels
// reading the device buffers, each weight row read once for every sequence and position of the pass); Logits,
// GraphDecode and the XLA devices run it as compiled GoMLX graphs (graphOps: one graph per bucketed length
// serves every decoder layer). Keys and values live in a kvcache.Store between layer visits.
//
// Choices, measured on the 2-core development VM with the simplego backend:
//   - For the graphs, weights reach the device by one copy from the shard buffer into a simplego shared buffer,
//     which the graph reads with no further copy. bf16 checkpoints are widened to f32 in that copy by default
//     (guard.ChooseDType: simplego's bf16 is emulated) and the widening is profiled as decode; --dtype bf16
//     copies them as they are.
//   - For the host kernels there is no transfer at all: a decoder layer's weight matrices are read in place
//     from the shard buffer it was loaded into (Engine.alias), in their stored dtype, and the buffer goes back
//     to the prefetch pool when the layer has computed. The kernels read bf16 in place (widened exactly in
//     registers, or multiplied by activations rounded to bf16 where the CPU has AVX512_BF16 and the dtype is
//     auto or bf16: see kernels.LinearBF16). Resident layers keep their loaded bytes
//     the same way, so resident and streamed decoding read the same bytes with the same kernels. Quick speed
//     run (4 layers): streamed decode 5.8 → 13.9 tok/s (the bf16→f32 widening, ~66 ms a layer, is gone),
//     resident 18.5 → 28.4 tok/s (half the bytes).
//   - Weight matrices are held as row chunks [chunks, out/chunks, in] (tensorSpec.deviceDims): simplego runs a
//     DotGeneral in parallel only over its batch axis, and above a size threshold it repacks the whole weight
//     matrix into blocks on every call. A decode step on a 1-layer TinyLlama-shape model took ~2.4 s with plain
//     [out, in] weights (the 32000×2048 lm_head took the repacking path) and ~0.15-0.25 s with row chunks.
//   - Decode steps on host kernels: resident decode of a 1-layer TinyLlama-shape model went from ~7 to ~14
//     tokens/s (generate --graph-decode keeps the graph path). Under --dtype f32 the kernels widen bf16 weights
//     exactly on the fly, so decode matches f32 compute of the same checkpoint while streaming half the bytes.
//   - Ops run sequentially inside a graph (simplego "ops_sequential"): its parallel scheduler races (go test
//     -race) when one value feeds several reshapes. Matrix products still use every core.
//
// Devices (backend.go): cpu is simplego; with the xla build tag, cuda and xla-cpu run every step, decode
// included, as XLA graphs through a PJRT plugin (backend_xla.go). Where the backend has no shared buffers (CUDA)
// the transfer stage converts weights into host staging buffers and copies them to the device
// (deviceTensor.upload), and the key/value cache, written on the host, is copied for each layer visit.
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/engine/kernels"
	"github.com/layerstream/layerstream/engine/model"
	"github.com/layerstream/layerstream/guard"
	"github.com/layerstream/layerstream/hub"
	"github.com/layerstream/layerstream/internal/bytesize"
	"github.com/layerstream/layerstream/internal/sections"
	"github.com/layerstream/layerstream/kvcache"
	"github.com/layerstream/layerstream/profiler"
	"github.com/layerstream/layerstream/shards"
	"github.com/layerstream/layerstream/tokenizer"
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
	// VerifyEveryLoad checksums a streamed shard on every load. By default (false) a shard is checksummed on its
	// first load and again only when its file changes (shards.VerifyOnce: same inode, size and times), which
	// saves a CRC pass over every layer on every token but trusts unchanged files not to rot between loads.
	VerifyEveryLoad bool
	// Device is DeviceCPU ("cpu", the default, pure Go), DeviceCUDA ("cuda") or DeviceXLACPU ("xla-cpu"); the
	// last two need a binary built with the xla build tag and a PJRT plugin (see README "CUDA and XLA").
	Device string
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
	DType string
	// KVCache is how the key/value cache holds keys and values: "f32" (the default) or "f16", which halves the
	// cache's memory (llama.cpp's default cache type) and rounds each key and value to float16 (a relative change
	// of at most 2⁻¹¹; one beyond ±65504 is clamped to it, with a warning). f16 is for the host kernels (cpu
	// without GraphDecode); the compiled graphs keep their cache in float32, and so does Logits over a whole
	// sequence of a model whose matrices are not block-quantized, which runs them (unless Arithmetic is
	// llama.cpp, which computes on the host kernels with this cache).
	KVCache string
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
	Arithmetic string
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
		o.DType = "auto"
	}
	switch o.KVCache {
	case "":
		o.KVCache = KVCacheF32
	case KVCacheF32:
	case KVCacheF16:
		if o.GraphDecode {
			return fmt.Errorf("kv cache (--kv-cache) %q needs the host kernels (device cpu without graph decode): the compiled graphs keep their cache in float32", o.KVCache)
		}
	default:
		return fmt.Errorf("kv cache (--kv-cache) %q: want %s or %s", o.KVCache, KVCacheF32, KVCacheF16)
	}
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
	if o.ObserveInputs != nil && (o.GraphDecode || o.Device != "" && o.Device != DeviceCPU) {
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

// The values of Options.KVCache.
const (
	KVCacheF32 = "f32"
	KVCacheF16 = "f16"
)

// The values of Options.Arithmetic.
const (
	ArithmeticEngine   = "engine"
	ArithmeticLlamaCpp = "llama.cpp"
)

// DefaultPrefillBudget is Options.PrefillBudget's default: prompt tokens per step beside decoding sequences.
const DefaultPrefillBudget = 64

// Engine runs one model. Its methods are safe for concurrent use: concurrent generations share the batch loop
// (Generate); Logits runs between its steps.
type Engine struct {
	opts    Options
	set     *shards.Set
	cfg     *checkpoint.Config
	gen     *checkpoint.GenerationConfig
	arch    model.Architecture
	plan    *model.Plan
	backend backends.Backend
	dtype   dtypes.DType // of weight matrices on the device
	// bf16Products: the host kernels multiply bf16 weight matrices by activations rounded to bf16
	// (kernels.LinearBF16) instead of exactly (kernels.Linear).
	bf16Products bool
	// ownQuantized: the shards were block-quantized by layerstream's split (their source record names a
	// quantizer), so their Q8_0 matrices take two-part inputs (kernels.QuantMatrix.TwoPart).
	ownQuantized bool
	// quantized: some weight matrix is block-quantized. The host kernels multiply those as llama.cpp does
	// (kernels.LinearQuant, activations rounded to 8 bits; 15 with TwoPart); the graphs would dequantize them and compute other
	// numbers, so Logits runs on the host kernels too.
	quantized bool

	layerSpecs []tensorSpec
	headUnit   string                          // lm_head, or embed when the output projection is tied to the embeddings
	layerExecs map[model.LayerKind]*graph.Exec // one compiled layer per kind of layer, built when first needed
	headExec   *graph.Exec

	pools    *pools       // streamed units' buffers
	resident []*weightSet // Options.Resident: every decoder layer
	embed    *weightSet   // resident head units (nil with StreamAll)
	norm     *weightSet
	head     *weightSet

	kv   *kvcache.Store // Logits' cache, reused while the capacity fits
	prof *profiler.Profiler

	// computeDType is the dtype the policy chose (guard.ChooseDType), whose range the activations are checked
	// against. health is what the last forward pass saw of each of its rows' residual stream: health[i][l] is
	// the largest |x| after decoder layer l over row i's new positions (guard.MaxAbs: NaN or Inf when a value
	// was), for the sequences' monitors (guard.Monitor.CheckActivations).
	computeDType checkpoint.DType
	health       [][]float32

	tokOnce     sync.Once   // Tokenizer
	clampWarned atomic.Bool // warnClamped has warned
	tok         *tokenizer.Tokenizer
	tokErr      error

	sched         scheduler      // the batch loop's queue (loop.go)
	logitsWaiting atomic.Int32   // Logits calls waiting for the lock: the loop stops its stream between steps
	bkv           *kvcache.Store // the batch loop's cache: one row per sequence
	rowBusy       []bool         // bkv rows in use by a sequence
	rowSession    []*Session     // bkv rows kept by a session
	step          atomic.Int64   // the profiler's step label: 0 prefill, 1.. decode
	decodeBound   decodeWatch    // warns once when decoding encoded shards, not the disk, bounds the stream

	mu     sync.Mutex
	closed bool
}

// Open prepares a model for generation. model is a shard folder (from layerstream split), a Hugging Face
// checkpoint folder (split into shards on first use) or a Hub repo id (downloaded first).
func Open(ctx context.Context, model string, opts Options) (*Engine, error) {
	if err := opts.fillDefaults(); err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	set, err := openShards(ctx, model, opts)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	if err := residentFits(set, opts); err != nil {
		set.Close()
		return nil, fmt.Errorf("engine: %w", err)
	}
	if opts.DirectIO == DirectIOAuto {
		opts.DirectIO = chooseDirectIO(set, opts)
	}
	set.SetDirectIO(opts.DirectIO == DirectIOOn)
	set.SetKeepMapped(true) // when streaming maps shards (mapShards); unmapped by Close
	if !opts.VerifyEveryLoad {
		set.SetVerify(shards.VerifyOnce)
	}
	e := &Engine{opts: opts, set: set, cfg: set.Config, gen: set.Generation, prof: opts.Profiler}
	if err := e.init(ctx); err != nil {
		e.Close()
		return nil, fmt.Errorf("engine %s: %w", model, err)
	}
	return e, nil
}

// DirectIO reports whether the engine reads its shards with O_DIRECT (Options.DirectIO, auto resolved at Open).
func (e *Engine) DirectIO() bool { return e.opts.DirectIO == DirectIOOn }

// mapShards reports whether the stream maps shard files (shards.Set.Map) rather than reading them.
func (e *Engine) mapShards() bool { return !e.opts.NoMap && e.opts.DirectIO != DirectIOOn }

func (e *Engine) hasUnit(name string) bool {
	_, ok := e.set.Unit(name)
	return ok
}

func (e *Engine) init(ctx context.Context) error {
	c := e.cfg
	var err error
	if e.arch, err = model.For(c); err != nil {
		return err
	}
	e.plan = e.arch.Plan()
	var caps guard.DeviceCaps
	if e.backend, caps, err = newBackend(e.opts); err != nil {
		return fmt.Errorf("backend: %w", err)
	}
	choice, err := chooseDType(e.opts, c.TorchDType, caps)
	if err != nil {
		return err
	}
	e.dtype = dtypes.Float32
	if choice.DType == checkpoint.BF16 {
		e.dtype = dtypes.BFloat16
	}
	e.computeDType = choice.DType
	slog.Debug("compute dtype", "dtype", choice.DType, "reason", choice.Reason)
	if choice.Warning != "" {
		slog.Warn(choice.Warning)
	}
	// The host kernels compute bf16 products where asked to (bf16) or, by default, where the CPU has the bf16
	// dot-product instruction: twice the rate of exact products, at the rounding of the activations llama.cpp
	// and PyTorch's bf16 products make too. --dtype f32 keeps them exact.
	req := strings.ToLower(strings.TrimSpace(e.opts.DType))
	e.bf16Products = choice.DType == checkpoint.BF16 || ((req == "" || req == "auto") && kernels.NativeBF16())
	e.ownQuantized = e.set.Source() != nil && e.set.Source().Quantizer != ""
	if e.bf16Products && strings.Contains(strings.ToLower(c.TorchDType), "bfloat16") && (e.opts.Device == "" || e.opts.Device == DeviceCPU) {
		slog.Debug("host matrix products: bf16 weights times activations rounded to bf16, summed in f32 (--dtype f32: exact)", "avx512_bf16", kernels.NativeBF16())
	}

	for _, u := range e.set.Units() {
		for _, t := range u.Tensors {
			e.quantized = e.quantized || t.DType.Quantized()
		}
	}

	// Every unit the model needs must exist before any work starts.
	if !e.hasUnit(unitEmbed) {
		return fmt.Errorf("missing unit embed (tensor %s)", embedWeight)
	}
	if !e.hasUnit(unitNorm) {
		return fmt.Errorf("missing unit norm (tensor %s)", normWeight)
	}
	for i := range c.NumHiddenLayers {
		if !e.hasUnit(layerUnit(i)) {
			return fmt.Errorf("missing unit %s (tensors model.layers.%d.*; config.json num_hidden_layers is %d)", layerUnit(i), i, c.NumHiddenLayers)
		}
	}
	switch {
	case e.hasUnit(unitLMHead):
		e.headUnit = unitLMHead
	case c.TieWordEmbeddings:
		e.headUnit = unitEmbed
	default:
		return fmt.Errorf("no output projection: tensor %s is missing and config.json has tie_word_embeddings false (a tied model sets it true to reuse %s)", lmHeadWeight, embedWeight)
	}

	if err := e.checkTensors(); err != nil {
		return err
	}
	if e.opts.Arithmetic == ArithmeticLlamaCpp {
		if err := e.checkLlamaCpp(); err != nil {
			return llamaCppRefusal(err)
		}
	}
	for _, s := range e.plan.Weights {
		dt := dtypes.Float32
		if len(s.Shape) == 2 {
			dt = e.dtype
		}
		e.layerSpecs = append(e.layerSpecs, tensorSpec{suffix: s.Name, shape: s.Shape, dtype: dt})
	}
	if e.opts.DeviceBudget > 0 {
		layerBytes := e.layerBytes()
		n := e.opts.DeviceBudget / max(layerBytes, 1)
		if n < 1 {
			return fmt.Errorf("device budget of %s is smaller than one decoder layer (%s)", bytesize.Format(e.opts.DeviceBudget), bytesize.Format(layerBytes))
		}
		e.opts.MaxLayerBuffers = int(min(n, int64(c.NumHiddenLayers)))
	}

	if err := e.buildExecs(); err != nil {
		return err
	}
	return e.allocate(ctx)
}

// layerBytes is the memory the largest decoder layer takes while the engine holds it (guard.HeldBytes): its
// block-quantized matrices as their blocks and bf16 matrices as bf16 on the host kernels' path, which multiplies
// them in place (alias), and converted to the compute dtype for the graphs.
func (e *Engine) layerBytes() int64 {
	var most int64
	for _, u := range e.set.Units() {
		if u.Layer < 0 {
			continue
		}
		var n int64
		for _, t := range u.Tensors {
			n += guard.HeldBytes(t.DType, t.Shape, t.Length, e.computeDType, !e.opts.GraphDecode)
		}
		most = max(most, n)
	}
	return most
}

// checkTensors makes sure every tensor of every unit is one the model reads, or one known to be unused
// (model.SkippedLayerTensors): a checkpoint holding weights the configuration does not account for (an o_proj.bias
// without attention_bias, q_norm weights for a family without q/k norms) is refused by name rather than run
// without them. A tensor the model reads must have the shape the configuration implies (from the manifest, so
// that a config.json disagreeing with the weights is refused now rather than when generation reaches the layer).
func (e *Engine) checkTensors() error {
	layer := map[string][]int{}
	for _, s := range e.plan.Weights {
		layer[s.Name] = s.Shape
	}
	for _, name := range model.SkippedLayerTensors {
		layer[name] = nil
	}
	for _, u := range e.set.Units() {
		for _, t := range u.Tensors {
			var shape []int
			var used bool
			if u.Layer >= 0 {
				shape, used = layer[strings.TrimPrefix(t.Name, unitPrefix(u.Name))]
			} else if used = t.Name == embedWeight || t.Name == normWeight || t.Name == lmHeadWeight; used {
				shape = e.headSpecs(u.Name)[0].shape
			}
			if !used {
				return fmt.Errorf("tensor %q (unit %s) is not used by %s with this config.json: refusing to run without it (a config key that enables it may be missing, e.g. attention_bias or mlp_bias; see TROUBLESHOOTING.md %q)", t.Name, u.Name, e.cfg.Arch.Name, sections.UnusedTensor)
			}
			if shape != nil && !slices.Equal(int64s(shape), t.Shape) {
				return fmt.Errorf("unit %s: tensor %q has shape %v, the config implies %v (config.json disagrees with the weights)", u.Name, t.Name, t.Shape, shape)
			}
		}
	}
	return nil
}

// headSpecs are the tensors of the non-layer units.
func (e *Engine) headSpecs(unit string) []tensorSpec {
	c := e.cfg
	switch unit {
	case unitEmbed:
		return []tensorSpec{{suffix: embedWeight, shape: []int{c.VocabSize, c.HiddenSize}, dtype: e.dtype}}
	case unitNorm:
		return []tensorSpec{{suffix: normWeight, shape: []int{c.HiddenSize}, dtype: dtypes.Float32}}
	default:
		return []tensorSpec{{suffix: lmHeadWeight, shape: []int{c.VocabSize, c.HiddenSize}, dtype: e.dtype}}
	}
}

// allocate creates the device buffers: the stream pools, and the resident units loaded once.
func (e *Engine) allocate(ctx context.Context) error {
	// The pooled buffers hold the streamed units: sized for the largest (Load grows a buffer for a bigger one).
	hostBuffers, hostSize := e.opts.Prefetch, 0
	for _, name := range e.schedule() {
		if u, ok := e.set.Unit(name); ok {
			hostSize = max(hostSize, int(u.BufferSize()))
		}
	}
	if e.mapShards() {
		hostSize = 0 // the shards are mapped: the buffers only hold decode areas, grown when a unit needs one
	}
	if !e.opts.Resident && !e.opts.GraphDecode {
		// The computing layer keeps its buffer (alias): without this one, one read fewer would be in flight
		// (O_DIRECT, 4-layer TinyLlama shape, 4 alternating runs: 0.217 s/token without it, 0.193 with it).
		hostBuffers++
	}
	e.pools = &pools{host: make(chan *shards.Buffer, hostBuffers), sets: map[string]chan *weightSet{}}
	for range hostBuffers {
		e.pools.host <- shards.NewBuffer(hostSize)
	}
	addSets := func(kind string, n int, specs []tensorSpec) error {
		ch := make(chan *weightSet, n)
		for range n {
			w, err := newWeightSet(e.backend, kind, specs, !e.opts.GraphDecode)
			if err != nil {
				return err
			}
			e.pools.all = append(e.pools.all, w)
			ch <- w
		}
		e.pools.sets[kind] = ch
		return nil
	}
	if e.opts.Resident {
		for i := range e.cfg.NumHiddenLayers {
			w, err := e.loadResident(ctx, kindLayer, layerUnit(i), e.layerSpecs)
			if err != nil {
				return err
			}
			e.resident = append(e.resident, w)
		}
	} else if err := addSets(kindLayer, e.opts.MaxLayerBuffers, e.layerSpecs); err != nil {
		return err
	}
	if e.opts.StreamAll {
		for _, u := range []string{unitEmbed, unitNorm, e.headUnit} {
			if _, ok := e.pools.sets[u]; !ok {
				if err := addSets(u, 1, e.headSpecs(u)); err != nil {
					return err
				}
			}
		}
		return nil
	}
	var err error
	if e.embed, err = e.loadResident(ctx, unitEmbed, unitEmbed, e.headSpecs(unitEmbed)); err != nil {
		return err
	}
	if e.norm, err = e.loadResident(ctx, unitNorm, unitNorm, e.headSpecs(unitNorm)); err != nil {
		return err
	}
	e.head = e.embed
	if e.headUnit == unitLMHead {
		e.head, err = e.loadResident(ctx, unitLMHead, unitLMHead, e.headSpecs(unitLMHead))
	}
	return err
}

// loadResident loads unit into a new set kept for the Engine's life.
//
// On the host-kernel path (no GraphDecode) the unit is kept as loaded, in a buffer of its own or, for the head
// units (embedding, final norm, output projection) with mapped shards, in the mapping the set keeps; the host
// kernels read it in place (alias) like a streamed layer's, in the same dtype: resident and streamed decoding run
// the same kernels over the same bytes, and the output projection reads bf16 weights, half the bytes of an f32
// copy. The device buffers serve the graphs (Logits) and are filled the first time one runs (deviceReady). With
// GraphDecode the unit goes through a pooled host buffer into the device buffers at once.
func (e *Engine) loadResident(ctx context.Context, kind, unit string, specs []tensorSpec) (*weightSet, error) {
	w, err := newWeightSet(e.backend, kind, specs, !e.opts.GraphDecode)
	if err != nil {
		return nil, err
	}
	e.pools.all = append(e.pools.all, w)
	mapped := kind != kindLayer && e.mapShards()
	inPlace := !e.opts.GraphDecode
	buf := shards.NewBuffer(0) // grown by Load to the unit's size; the view keeps it alive
	load := e.set.Load
	switch {
	case mapped:
		load = e.set.Map // the set keeps the mapping: the device buffers are filled from the page cache
	case !inPlace:
		buf = <-e.pools.host
		defer func() { e.pools.host <- buf }()
	}
	l, err := load(ctx, unit, buf)
	if err != nil {
		return nil, err
	}
	fill := func() error { return e.fill(w, l) }
	if inPlace {
		// The host kernels read it in place; the device buffers (the graphs') are filled when first needed,
		// so an engine that never runs a graph (Logits) never holds the f32 copy of its layers, embedding and
		// lm_head.
		w.pending = l
		fill = func() error { return e.alias(w, l) }
	}
	if err := e.guardMapped(fill); err != nil {
		return nil, err
	}
	return w, nil
}

// deviceReady fills the device buffers of a set whose filling was deferred (weightSet.pending).
func (e *Engine) deviceReady(w *weightSet) error {
	if w.pending == nil {
		return nil
	}
	if err := e.guardMapped(func() error { return e.fill(w, w.pending) }); err != nil {
		return err
	}
	w.pending = nil
	return nil
}

// Config is the model's configuration.
func (e *Engine) Config() *checkpoint.Config { return e.cfg }

// Generation is the model's generation_config.json (empty when absent).
func (e *Engine) Generation() *checkpoint.GenerationConfig { return e.gen }

// ContextLength is the most positions a sequence can hold (prompt and generated tokens): max_position_embeddings,
// or more where rope scaling extends it.
func (e *Engine) ContextLength() int { return e.plan.Context }

// Dir is the shard folder, which also holds the model's config and tokenizer files.
func (e *Engine) Dir() string { return e.set.Dir }

// Stats reports the engine's device-buffer use.
type Stats struct {
	// LayerBuffers is the number of decoder-layer weight sets allocated on the device.
	LayerBuffers int
	// PeakLayerBuffersInUse is the most streamed layer sets filled and not yet released at one time.
	PeakLayerBuffersInUse int
}

// Stats returns the device-buffer counters.
func (e *Engine) Stats() Stats {
	s := Stats{PeakLayerBuffersInUse: int(e.pools.peakInUse.Load())}
	if e.opts.Resident {
		s.LayerBuffers = len(e.resident)
	} else {
		s.LayerBuffers = cap(e.pools.sets[kindLayer])
	}
	return s
}

// Close frees the device buffers, after the generations in the batch have ended (requests still waiting end
// with ErrClosed). The Engine is unusable afterwards.
func (e *Engine) Close() error {
	e.closeQueue()
	e.sched.loops.Wait() // the sequences in the batch end
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	if e.pools != nil {
		e.pools.free()
	}
	if e.set != nil {
		if err := e.set.Close(); err != nil {
			slog.Error("engine: unmapping shards", "err", err)
		}
	}
	freeKVStore(e.kv)
	freeKVStore(e.bkv)
	e.kv, e.bkv = nil, nil
	if e.backend != nil {
		e.backend.Finalize()
	}
	return nil
}
