package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/engine/kernels"
	"github.com/layerstream/layerstream/guard"
	"github.com/layerstream/layerstream/internal/sections"
	"github.com/layerstream/layerstream/reference"
	"github.com/layerstream/layerstream/shards"
)

func init() {
	register(command{
		name:    "verify",
		summary: "check the engine against references: transformers' own outputs where the checkpoint has them, a float64 forward pass in plain Go, and its decode steps against one full forward pass",
		usage:   "--model DIR [--prompt TEXT | --ids 1,2,3]",
		setup: func(fs *flag.FlagSet) func(ctx context.Context, args []string) error {
			var o verifyOptions
			fs.StringVar(&o.model, "model", "", "Hugging Face checkpoint folder (required; the reference reads its safetensors)")
			ids := fs.String("ids", "", "comma-separated token ids to run, e.g. 1,403,407,261,378")
			prompt := fs.String("prompt", "", "text to run, encoded with the model's tokenizer.json (instead of --ids)")
			fs.StringVar(&o.dtype, "dtype", "auto", "engine compute dtype: auto, f32 or bf16 (sets the tolerance)")
			fs.Var(&o.device, "device", "the engine's compute device: cpu, cuda or xla-cpu (a binary built with -tags xla); the references always run on the CPU")
			fs.Float64Var(&o.computeCapability, "compute-capability", 0, "CUDA compute capability of the GPU (9.0 H100/H200) for --dtype auto, as generate's")
			fs.StringVar(&o.shardDir, "shards", "", "where the engine splits the checkpoint and streams from (default: the engine's)")
			fs.BoolVar(&o.perLayer, "per-layer", false, "also compare the logits after every decoder layer (runs "+
				"the engine once per depth on a truncated copy of the config: slow for deep models)")
			fs.Float64Var(&o.atol, "atol", 0, "override the absolute logit tolerance (default 1e-4 for f32, unchecked for bf16)")
			fs.Float64Var(&o.minCos, "min-cos", 0, "override the cosine tolerance (default 0.99999 for f32, 0.99 for bf16)")
			fs.StringVar(&o.transformers, "reference", "", "outputs transformers computed for this checkpoint (input_ids, logits, greedy_ids in a safetensors file; default: "+reference.TransformersFile+" in the checkpoint folder, when there)")
			fs.IntVar(&o.decodeSteps, "decode-steps", 8, "greedy decode steps checked against one full forward pass over the same ids (a broken key/value cache shows there); 0 skips")
			return func(ctx context.Context, args []string) error {
				if len(args) != 0 {
					return usageErrorf("unexpected arguments %q", args)
				}
				if o.model == "" {
					return usageErrorf("--model is required")
				}
				var err error
				if o.transformers == "" {
					if p := filepath.Join(o.model, reference.TransformersFile); fileExists(p) {
						o.transformers = p
					}
				}
				switch {
				case *prompt != "" && *ids != "":
					return usageErrorf("give --prompt or --ids, not both")
				case *prompt == "" && *ids == "" && o.transformers != "":
					// The reference outputs bring their own prompt.
				case *prompt != "":
					tok, err := loadTokenizer(o.model)
					if err != nil {
						return err
					}
					if o.ids, err = tok.Encode(*prompt, true); err != nil {
						return fmt.Errorf("--prompt: %w", err)
					}
				default:
					if o.ids, err = parseIDs(*ids); err != nil {
						return usageErrorf("%v", err)
					}
				}
				return runVerify(ctx, o, os.Stdout)
			}
		},
	})
}

// verifyOptions are verify's flags.
type verifyOptions struct {
	model  string
	ids    []int
	dtype  string
	device engine.Device
	// computeCapability is the GPU's, for the dtype policy on cuda.
	computeCapability float64
	shardDir          string
	perLayer          bool
	atol, minCos      float64
	transformers      string // reference outputs made by transformers, if any
	decodeSteps       int
	// broken, when set (tests), replaces the engine of the decode check by what it returns.
	broken func(*engine.Engine) decoder
}

func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

// parseIDs reads "1,2, 3" into token ids.
func parseIDs(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("--prompt or --ids is required")
	}
	var ids []int
	for f := range strings.SplitSeq(s, ",") {
		id, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || id < 0 {
			return nil, fmt.Errorf("--ids: %q is not a token id", strings.TrimSpace(f))
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// runVerify computes the references, runs the engine streamed and resident, prints the comparison table to w
// and returns an error when any comparison is beyond its tolerance. The references: transformers' own outputs
// when the checkpoint has them (o.transformers: its logits and greedy ids, independent of this program's config
// parsing), the float64 forward pass of package reference, and the engine's own full forward pass for its decode
// steps (the key/value cache).
func runVerify(ctx context.Context, o verifyOptions, w io.Writer) error {
	v, err := newVerifyRun(o)
	if err != nil {
		return err
	}
	r, err := v.compare(ctx)
	if err != nil {
		return err
	}
	// The health checks see the engine's logits too, so a NaN names its likely causes.
	mon := guard.NewMonitor(guard.MonitorOptions{})
	for p, row := range r.streamed {
		_ = mon.CheckLogits(p, row) // non-strict: warns once per kind, never fails
	}
	if err := v.report(w, r.diffs); err != nil {
		return err
	}
	switch {
	case r.failed[sections.KVCache]:
		return fmt.Errorf("the engine's decode steps disagree with its own full forward pass: the key/value cache is not what it should be (see %s)", sections.Anchor(sections.KVCache))
	case r.failed[sections.VerifyMismatch]:
		return fmt.Errorf("the engine disagrees with the reference beyond tolerance (see %s)", sections.Anchor(sections.VerifyMismatch))
	}
	return nil
}

// streamedVsResident is the tolerance between the engine streamed and resident: streaming must not change the
// computation, so they agree to float32 rounding.
var streamedVsResident = reference.Tolerance{MaxAbs: 1e-5, MinCosine: 0.999999}

// verifyRun is one verify: the checkpoint, the engine's options with its dtype chosen, and the tolerances that
// follow from that dtype and from the checkpoint's blocks.
type verifyRun struct {
	o         verifyOptions
	ck        *checkpoint.Checkpoint
	choice    guard.Choice
	eopts     engine.Options
	logitTol  reference.Tolerance // the engine against the references
	decodeTol reference.Tolerance // decode steps against one full pass
	quantized bool                // the checkpoint holds block-quantized matrices
	hf        *reference.Transformers
}

// verifyResult is what verifyRun.compare found: every comparison, the sections of those beyond tolerance, and
// the streamed engine's logits.
type verifyResult struct {
	diffs    []reference.Diff
	failed   map[string]bool
	streamed [][]float32
}

// newVerifyRun opens the checkpoint, chooses the engine's dtype as generate would, sets the tolerances and reads
// transformers' outputs (whose prompt is the default one).
func newVerifyRun(o verifyOptions) (*verifyRun, error) {
	ck, err := engine.OpenCheckpoint(o.model)
	if err != nil {
		if shards.IsSet(o.model) {
			return nil, fmt.Errorf("verify needs the Hugging Face checkpoint folder, whose safetensors the reference reads; %s is a shard folder (pass the checkpoint it was split from, and --shards %s)", o.model, o.model)
		}
		return nil, err
	}
	// The engine applies the same policy (and logs it); verify needs the choice for the tolerance.
	eopts := engine.Options{DType: engine.DType(o.dtype), ShardDir: o.shardDir, Device: o.device, ComputeCapability: o.computeCapability}
	choice, err := engine.ChooseDType(eopts, ck.Config.TorchDType)
	if err != nil {
		return nil, err
	}
	eopts.DType = map[checkpoint.DType]engine.DType{checkpoint.F32: "f32", checkpoint.BF16: "bf16", checkpoint.F16: "f16"}[choice.DType]
	withFlags := func(t reference.Tolerance) reference.Tolerance {
		if o.atol > 0 {
			t.MaxAbs = o.atol
		}
		if o.minCos > 0 {
			t.MinCosine = o.minCos
		}
		return t
	}
	// Decode steps against one pass compare the engine with itself: the dtype's tolerance, or a quantized one's.
	v := &verifyRun{o: o, ck: ck, choice: choice, eopts: eopts, logitTol: withFlags(reference.LogitTolerance(choice.DType))}
	v.decodeTol = decodeTolerance(v.logitTol)
	v.quantized = slices.ContainsFunc(ck.Tensors, func(t checkpoint.TensorInfo) bool { return t.DType.Quantized() })
	if v.quantized {
		v.logitTol = withFlags(reference.QuantizedLogitTolerance)
		v.decodeTol = reference.QuantizedDecodeTolerance
	}
	if o.transformers != "" {
		if v.hf, err = reference.LoadTransformers(o.transformers); err != nil {
			return nil, err
		}
		if v.o.ids == nil {
			for _, id := range v.hf.InputIDs {
				v.o.ids = append(v.o.ids, int(id))
			}
		}
	}
	if len(v.o.ids) == 0 {
		return nil, usageErrorf("--prompt or --ids is required (the checkpoint has no %s to take a prompt from)", reference.TransformersFile)
	}
	return v, nil
}

// compare runs the float64 reference and the engine streamed and resident, and compares them with each other,
// with transformers' outputs, layer by layer (--per-layer) and decode step by decode step.
func (v *verifyRun) compare(ctx context.Context) (verifyResult, error) {
	var r verifyResult
	ids := v.o.ids
	ref, err := reference.ForwardContext(ctx, v.ck, ids)
	if err != nil {
		return r, err
	}
	e, err := engine.Open(ctx, v.o.model, v.eopts)
	if err != nil {
		return r, fmt.Errorf("engine (streamed): %w", err)
	}
	defer e.Close()
	if r.streamed, err = e.Logits(ctx, ids); err != nil {
		return r, fmt.Errorf("engine (streamed): %w", err)
	}
	ropts := v.eopts
	ropts.Resident = true
	resident, err := engineLogits(ctx, v.o.model, ropts, ids)
	if err != nil {
		return r, fmt.Errorf("engine (resident): %w", err)
	}
	if v.hf != nil {
		ds, err := compareTransformers(ctx, e, v.hf, v.logitTol)
		if err != nil {
			return r, err
		}
		r.diffs = append(r.diffs, ds...)
	}
	if v.o.perLayer {
		ds, err := v.layerDiffs(ctx, ref)
		if err != nil {
			return r, err
		}
		r.diffs = append(r.diffs, ds...)
	}
	for _, c := range []struct {
		against string
		got     [][]float32
	}{{"streamed vs reference", r.streamed}, {"resident vs reference", resident}} {
		d, err := reference.Compare("logits", c.against, c.got, ref.Logits, v.logitTol)
		if err != nil {
			return r, err
		}
		r.diffs = append(r.diffs, d)
	}
	d, err := reference.Compare("logits", "streamed vs resident", r.streamed, resident, streamedVsResident)
	if err != nil {
		return r, err
	}
	r.diffs = append(r.diffs, d)
	r.failed = map[string]bool{}
	if slices.ContainsFunc(r.diffs, func(d reference.Diff) bool { return !d.OK() }) {
		r.failed[sections.VerifyMismatch] = true
	}
	if v.o.decodeSteps > 0 {
		var dec decoder = e
		if v.o.broken != nil {
			dec = v.o.broken(e)
		}
		d, err := compareDecode(ctx, dec, ids, v.o.decodeSteps, v.decodeTol)
		if err != nil {
			return r, err
		}
		if d != nil {
			r.diffs = append(r.diffs, *d)
			r.failed[sections.KVCache] = !d.OK()
		}
	}
	return r, nil
}

// layerDiffs compares the logits after each decoder layer: the engine offers only logits, so layer k is compared
// through the logits of the model cut after layer k.
func (v *verifyRun) layerDiffs(ctx context.Context, ref *reference.Output) ([]reference.Diff, error) {
	var diffs []reference.Diff
	for k := 1; k < v.ck.Config.NumHiddenLayers; k++ {
		want, err := reference.HeadLogits(v.ck, ref.Hidden[k-1])
		if err != nil {
			return nil, err
		}
		got, err := truncatedLogits(ctx, v.ck, k, engine.Options{DType: v.eopts.DType}, v.o.ids)
		if err != nil {
			return nil, fmt.Errorf("engine (first %d layers): %w", k, err)
		}
		d, err := reference.Compare(fmt.Sprintf("layer.%d", k-1), "streamed vs reference", got, want, v.logitTol)
		if err != nil {
			return nil, err
		}
		diffs = append(diffs, d)
	}
	return diffs, nil
}

// report prints what was compared, against what and within which tolerances, then the table of diffs.
func (v *verifyRun) report(w io.Writer, diffs []reference.Diff) error {
	o := v.o
	fmt.Fprintf(w, "verify %s: %d tokens, dtype %s (%s)\n", o.model, len(o.ids), v.choice.DType, v.choice.Reason)
	if v.hf != nil {
		fmt.Fprintf(w, "transformers: the outputs in %s (%d prompt ids, %d greedy ids; on the greedy row, cosine is the share of greedy ids equal to transformers', max|diff| the number that differ, at the first that differs)\n", o.transformers, len(v.hf.InputIDs), len(v.hf.GreedyIDs))
	} else {
		fmt.Fprintf(w, "transformers: no %s beside the checkpoint (--reference FILE); the float64 reference reads config.json as the engine does, so it cannot catch a misread config\n", reference.TransformersFile)
	}
	fmt.Fprintf(w, "tolerance: logits %s; streamed vs resident %s\n", v.logitTol, streamedVsResident)
	if v.quantized {
		fmt.Fprintln(w, "quantized: the checkpoint holds block-quantized matrices; the reference multiplies them dequantized in float64, the engine (as llama.cpp) with activations rounded to 8 bits, so the logits are held to their direction, and decode steps to their one pass within a nat (an activation's rounding can flip where the attention sums in another order)")
	}
	if !o.perLayer {
		fmt.Fprintln(w, "per-layer: the engine returns logits only; --per-layer compares the logits after each layer")
	}
	_, err := reference.WriteTable(w, diffs)
	return err
}

// compareTransformers runs the engine on the prompt of transformers' outputs: its logits at every position
// against transformers', and its greedy continuation against transformers' greedy ids (a row whose cosine is the
// share of ids equal, whose max|diff| counts those that differ, located at the first).
func compareTransformers(ctx context.Context, e *engine.Engine, hf *reference.Transformers, tol reference.Tolerance) ([]reference.Diff, error) {
	ids := make([]int, len(hf.InputIDs))
	for i, id := range hf.InputIDs {
		ids[i] = int(id)
	}
	got, err := e.Logits(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("engine on transformers' prompt: %w", err)
	}
	want := make([][]float32, len(ids))
	for i := range want {
		want[i] = hf.Row(i)
	}
	d, err := reference.Compare("logits", "streamed vs transformers", got, want, tol)
	if err != nil || len(hf.GreedyIDs) == 0 {
		return []reference.Diff{d}, err
	}
	res, err := e.Generate(ctx, engine.Request{PromptIDs: ids, MaxNewTokens: len(hf.GreedyIDs), StopIDs: []int{}}, nil)
	if err != nil {
		return nil, fmt.Errorf("engine's greedy continuation of transformers' prompt: %w", err)
	}
	g := reference.Diff{Name: "greedy", Against: "greedy ids vs transformers", Row: -1, Col: -1, Tol: reference.Tolerance{MinCosine: 1}}
	for i, want := range hf.GreedyIDs {
		if i < len(res.GeneratedIDs) && int64(res.GeneratedIDs[i]) == want {
			continue
		}
		g.MaxAbs++
		if g.Row < 0 {
			g.Row, g.Col = len(ids)+i, -1
			if i < len(res.GeneratedIDs) {
				g.Col = res.GeneratedIDs[i]
			}
		}
	}
	g.Cosine = 1 - g.MaxAbs/float64(len(hf.GreedyIDs))
	return []reference.Diff{d, g}, nil
}

// decodeTolerance is how far a decode step's log-probabilities may be from the full forward pass's: twice the
// logit tolerance in f32 (a log-probability moves by at most twice its logit's error), 0.25 nats otherwise.
func decodeTolerance(logits reference.Tolerance) reference.Tolerance {
	if logits.MaxAbs > 0 {
		return reference.Tolerance{MaxAbs: 2 * logits.MaxAbs}
	}
	return reference.Tolerance{MaxAbs: 0.25}
}

// compareDecode checks the engine's decode steps (its key/value cache) against one full forward pass: steps
// greedy tokens continue ids, reporting each step's top log-probabilities; then ids and the tokens fed back are
// run in one pass, whose log-softmax at each step's position must give the same log-probabilities. A cache that
// was not filled, or filled at the wrong positions, shows as a large difference from the first decode step on.
// It returns nil when the context leaves no room for a decode step.
func compareDecode(ctx context.Context, e decoder, ids []int, steps int, tol reference.Tolerance) (*reference.Diff, error) {
	steps = min(steps, e.ContextLength()-len(ids))
	if steps < 2 {
		return nil, nil
	}
	var tops [][]engine.TokenLogprob
	res, err := e.Generate(ctx, engine.Request{PromptIDs: ids, MaxNewTokens: steps, StopIDs: []int{}, TopLogprobs: engine.MaxTopLogprobs}, func(t engine.Token) error {
		tops = append(tops, t.TopLogprobs)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("engine decode steps: %w", err)
	}
	full := append(slices.Clone(ids), res.GeneratedIDs[:len(res.GeneratedIDs)-1]...)
	logits, err := e.Logits(ctx, full)
	if err != nil {
		return nil, fmt.Errorf("engine full forward pass: %w", err)
	}
	vocab := len(logits[0])
	got, want := make([][]float32, len(tops)), make([][]float32, len(tops))
	for k, top := range tops {
		row := logits[len(ids)-1+k]
		lse := kernels.LogSumExp(row)
		got[k], want[k] = make([]float32, vocab), make([]float32, vocab)
		for _, t := range top {
			got[k][t.ID] = float32(t.Logprob)
			want[k][t.ID] = float32(float64(row[t.ID]) - lse)
		}
	}
	d, err := reference.Compare("decode", "decode steps vs one pass", got, want, tol)
	if err != nil {
		return nil, err
	}
	if d.Row >= 0 {
		d.Row += len(ids) - 1 // the step's position
	}
	return &d, nil
}

// decoder is what compareDecode needs of an engine (*engine.Engine; tests give it a broken one).
type decoder interface {
	Generate(ctx context.Context, req engine.Request, onToken func(engine.Token) error) (*engine.Result, error)
	Logits(ctx context.Context, ids []int) ([][]float32, error)
	ContextLength() int
}

// engineLogits opens the model with opts, runs one forward pass and closes it.
func engineLogits(ctx context.Context, model string, opts engine.Options, ids []int) ([][]float32, error) {
	e, err := engine.Open(ctx, model, opts)
	if err != nil {
		return nil, err
	}
	logits, err := e.Logits(ctx, ids)
	return logits, errors.Join(err, e.Close())
}

// truncatedLogits runs the engine on the model cut after its first k layers: a temporary checkpoint holding
// config.json with num_hidden_layers k, the other small files, and one safetensors file with the embedding, the
// first k layers, the final norm and lm_head.
func truncatedLogits(ctx context.Context, ck *checkpoint.Checkpoint, k int, opts engine.Options, ids []int) ([][]float32, error) {
	tmp, err := os.MkdirTemp("", "layerstream-verify-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	if err := writeTruncated(ck, k, tmp); err != nil {
		return nil, fmt.Errorf("truncated copy of %s: %w", ck.Dir, err)
	}
	return engineLogits(ctx, tmp, opts, ids)
}

// writeTruncated writes the first k layers of ck as a checkpoint in dir.
func writeTruncated(ck *checkpoint.Checkpoint, k int, dir string) error {
	b, err := os.ReadFile(filepath.Join(ck.Dir, "config.json"))
	if err != nil {
		return err
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		return fmt.Errorf("config.json: %w", err)
	}
	cfg["num_hidden_layers"] = k
	if b, err = json.Marshal(cfg); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		return err
	}
	for _, name := range []string{"generation_config.json", "tokenizer.json", "tokenizer_config.json"} {
		if b, err := os.ReadFile(filepath.Join(ck.Dir, name)); err == nil {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				return err
			}
		}
	}
	var keep []checkpoint.TensorInfo
	for _, t := range ck.Tensors {
		var layer int
		if n, _ := fmt.Sscanf(t.Name, "model.layers.%d.", &layer); n == 1 && layer >= k {
			continue
		}
		keep = append(keep, t)
	}
	// safetensors: an 8-byte little-endian header length, the JSON header (padded to 8 bytes), then the data.
	header := map[string]any{}
	var off int64
	for _, t := range keep {
		header[t.Name] = map[string]any{"dtype": t.DType, "shape": t.Shape, "data_offsets": []int64{off, off + t.Length}}
		off += t.Length
	}
	hdr, err := json.Marshal(header)
	if err != nil {
		return err
	}
	for len(hdr)%8 != 0 {
		hdr = append(hdr, ' ')
	}
	f, err := os.Create(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	werr := binary.Write(w, binary.LittleEndian, uint64(len(hdr)))
	if werr == nil {
		_, werr = w.Write(hdr)
	}
	for _, t := range keep {
		if werr != nil {
			break
		}
		data := make([]byte, t.Length)
		if werr = checkpoint.ReadTensorAt(t, data); werr == nil {
			_, werr = w.Write(data)
		}
	}
	if werr == nil {
		werr = w.Flush()
	}
	return errors.Join(werr, f.Close())
}
