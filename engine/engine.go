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
//     from the shard buffer it was loaded into (weightStore.alias), in their stored dtype, and the buffer goes back
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
	"sync"
	"sync/atomic"

	"github.com/gomlx/gomlx/backends"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/engine/model"
	"github.com/layerstream/layerstream/grammar"
	"github.com/layerstream/layerstream/guard"
	"github.com/layerstream/layerstream/shards"
	"github.com/layerstream/layerstream/tokenizer"
)

// Engine runs one model. It is built from types with one job each along the pipeline:
//
//   - weightStore (store.go, weights.go, stream.go): the shard set, the buffer pools, the resident units and the
//     stream that reads and transfers the others;
//   - runner (forward.go, hostpass.go, graphpass.go): one forward pass over a batch of new positions, on the host
//     kernels or as compiled graphs, with one per-layer loop for both;
//   - batcher (loop.go): the queue, admission, continuous batching and sessions.
//
// Its methods are safe for concurrent use: concurrent generations share the batch loop (Generate); Logits runs
// between its steps.
type Engine struct {
	opts  Options
	cfg   *checkpoint.Config
	gen   *checkpoint.GenerationConfig
	plan  *model.Plan
	store *weightStore
	run   *runner
	batch *batcher
	// passes serialises forward passes: the batch loop holds it for each step, Logits between two steps.
	passes passLock

	tokOnce      sync.Once // Tokenizer
	grammarOnce  sync.Once // GrammarIndex
	grammarIndex *grammar.Index
	tok          *tokenizer.Tokenizer
	tokErr       error

	backend backends.Backend
}

// passLock serialises an engine's forward passes. waiting counts the Logits calls waiting for it: the batch loop
// then stops its stream between two steps, since its prefetched units would hold the buffers Logits' pass needs.
type passLock struct {
	sync.Mutex
	waiting atomic.Int32
	closed  bool
}

// lockBetweenSteps takes the lock for a pass outside the batch loop (Logits and the like), counted as waiting so
// that the loop yields it between two steps; once the engine is closed it returns ErrClosed without the lock.
// The caller unlocks.
func (p *passLock) lockBetweenSteps() error {
	p.waiting.Add(1)
	p.Lock()
	p.waiting.Add(-1)
	if p.closed {
		p.Unlock()
		return ErrClosed
	}
	return nil
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
		opts.largerThanMemory = opts.DirectIO == DirectIOOn
	}
	set.SetDirectIO(opts.DirectIO == DirectIOOn)
	set.SetKeepMapped(true) // when streaming maps shards (mapShards); unmapped by Close
	if !opts.VerifyEveryLoad {
		set.SetVerify(shards.VerifyOnce)
	}
	e := &Engine{opts: opts, cfg: set.Config, gen: set.Generation}
	if err := e.init(ctx, set); err != nil {
		if e.store == nil {
			set.Close()
		}
		e.Close()
		return nil, fmt.Errorf("engine %s: %w", model, err)
	}
	return e, nil
}

// DirectIO reports whether the engine reads its shards with O_DIRECT (Options.DirectIO, auto resolved at Open).
func (e *Engine) DirectIO() bool { return e.opts.DirectIO == DirectIOOn }

// init builds the architecture, the backend and the pipeline's parts for the shard set.
func (e *Engine) init(ctx context.Context, set *shards.Set) error {
	arch, err := model.For(e.cfg)
	if err != nil {
		return err
	}
	e.plan = arch.Plan()
	var caps guard.DeviceCaps
	if e.backend, caps, err = newBackend(e.opts); err != nil {
		return fmt.Errorf("backend: %w", err)
	}
	choice, err := chooseDType(e.opts, e.cfg.TorchDType, caps)
	if err != nil {
		return err
	}
	slog.Debug("compute dtype", "dtype", choice.DType, "reason", choice.Reason)
	if choice.Warning != "" {
		slog.Warn(choice.Warning)
	}
	if e.store, err = newWeightStore(set, e.backend, e.plan, e.opts, choice.DType); err != nil {
		return err
	}
	if e.run, err = newRunner(arch, e.store, e.opts, choice.DType); err != nil {
		return err
	}
	// The draft model is loaded first: the memory budget (Options.MemoryBudget) counts what it then leaves.
	d, err := e.openDrafter(ctx)
	if err != nil {
		return err
	}
	e.batch = newBatcher(e.run, &e.passes, d, e.opts)
	return e.store.allocate(ctx)
}

// openDrafter opens Options.Draft: nil for none.
func (e *Engine) openDrafter(ctx context.Context) (drafter, error) {
	switch {
	case e.opts.Draft == "":
		return nil, nil
	case e.plan.Recompute > 0:
		return nil, errors.New("speculative decoding (--draft) is not implemented for a model that recomputes its cache past a length (Phi-3 longrope)")
	case recurrentPlan(e.plan) && e.opts.DraftLeaves > 0:
		return nil, fmt.Errorf("draft trees (--draft-leaves %d) are not implemented for %s, a model with recurrent (Gated DeltaNet linear-attention) layers: each leaf would need its own branch of the recurrent state; a chain (--draft-leaves 0) is", e.opts.DraftLeaves, e.cfg.Arch.Name)
	case e.opts.Draft == DraftNgram:
		return ngramDrafter{}, nil
	}
	return openDraftModel(ctx, e.opts.Draft, e.opts, e)
}

// Config is the model's configuration.
func (e *Engine) Config() *checkpoint.Config { return e.cfg }

// Generation is the model's generation_config.json (empty when absent).
func (e *Engine) Generation() *checkpoint.GenerationConfig { return e.gen }

// ContextLength is the most positions a sequence can hold (prompt and generated tokens): max_position_embeddings,
// or more where rope scaling extends it.
func (e *Engine) ContextLength() int { return e.plan.Context }

// Dir is the shard folder, which also holds the model's config and tokenizer files.
func (e *Engine) Dir() string { return e.store.set.Dir }

// Stats reports the engine's device-buffer use.
type Stats struct {
	// LayerBuffers is the number of decoder-layer weight sets allocated on the device.
	LayerBuffers int
	// PeakLayerBuffersInUse is the most streamed layer sets filled and not yet released at one time.
	PeakLayerBuffersInUse int
	// ResidentLayers are the decoder layers kept loaded (Options.Resident, or a memory budget), taking
	// ResidentBytes; the others, StreamedBytes of shards, are read for every forward pass.
	ResidentLayers               int
	ResidentBytes, StreamedBytes int64
	// LayerBytes are the decoder layers' shard bytes, all of them; ReadBytes those read from shard files so far
	// (units streamed and routed experts; from the disk under O_DIRECT, else maybe from the page cache).
	LayerBytes, ReadBytes int64
	// Experts are the expert cache's counters, where streamed mixture-of-experts layers read their routed
	// experts only (experts.go); zero otherwise.
	Experts ExpertStats
}

// ExpertStats count the routed experts passes asked for: found in the cache (or already being read: Hits) or
// read then (Misses); the experts predicted for the next layer (Predicted), of which its rows were then routed to
// PredictedUsed, and those read ahead on a prediction (ReadAhead: once the predictions proved accurate).
// CacheBytes is what the cache holds now, within BudgetBytes.
type ExpertStats struct {
	Hits, Misses                        int64
	Predicted, PredictedUsed, ReadAhead int64
	CacheBytes, BudgetBytes             int64
}

// HitRate is Hits / (Hits + Misses), 0 when no expert was asked for.
func (s ExpertStats) HitRate() float64 {
	if s.Hits+s.Misses == 0 {
		return 0
	}
	return float64(s.Hits) / float64(s.Hits+s.Misses)
}

// PredictionAccuracy is PredictedUsed / Predicted: the share of the predicted experts routed to, 0 when nothing
// was predicted.
func (s ExpertStats) PredictionAccuracy() float64 {
	if s.Predicted == 0 {
		return 0
	}
	return float64(s.PredictedUsed) / float64(s.Predicted)
}

// Stats returns the device-buffer counters.
func (e *Engine) Stats() Stats { return e.store.stats() }

// Close frees the device buffers, after the generations in the batch have ended (requests still waiting end
// with ErrClosed). The Engine is unusable afterwards.
func (e *Engine) Close() error {
	if e.batch != nil {
		e.batch.close() // the sequences in the batch end
	}
	e.passes.Lock()
	defer e.passes.Unlock()
	if e.passes.closed {
		return nil
	}
	e.passes.closed = true
	if e.batch != nil {
		e.batch.free()
		if e.batch.draft != nil {
			e.batch.draft.close()
		}
	}
	if e.run != nil {
		e.run.free()
	}
	if e.store != nil {
		e.store.close()
	}
	if e.backend != nil {
		e.backend.Finalize()
	}
	return nil
}

// Logits runs one forward pass over ids (a whole sequence from position 0) and returns the logits of every
// position: [len(ids)][vocab_size]. While generations run, it runs between two steps of their batch loop, which
// waits for it (the loop's read-ahead is dropped and starts again after it).
func (e *Engine) Logits(ctx context.Context, ids []int) ([][]float32, error) {
	if err := e.passes.lockBetweenSteps(); err != nil {
		return nil, err
	}
	defer e.passes.Unlock()
	// The checks generate makes of a prompt (newSequence).
	if err := e.checkIDs(ids); err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	if len(ids) > e.plan.Context {
		return nil, fmt.Errorf("engine: %d tokens exceed %s", len(ids), e.contextName())
	}
	r := e.run
	kv, err := r.kvStore(bucket(len(ids)), r.onHost(true))
	if err != nil {
		return nil, err
	}
	r.setStep(0)
	st := e.store.newStream(ctx, 1, !r.onHost(true))
	if st != nil {
		defer st.stop()
	}
	return r.pass(ctx, st, kv, ids, true)
}
