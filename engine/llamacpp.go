package engine

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/engine/kernels"
	"github.com/layerstream/layerstream/engine/kernels/ggml"
	"github.com/layerstream/layerstream/engine/model"
	"github.com/layerstream/layerstream/guard"
	"github.com/layerstream/layerstream/internal/grow"
	"github.com/layerstream/layerstream/internal/sections"
	"github.com/layerstream/layerstream/quant"
)

// Options.Arithmetic llama.cpp: the host ops below replace hostOps' own kernels with engine/kernels/ggml and
// kernels.LinearQuantGGML, which compute as llama.cpp's CPU backend does (its graph for the Llama architecture,
// build_attn_mha without flash attention over a float32 cache, the swiglu MLP), and the rotary tables come from
// ggml's own recurrence and the C library's sine and cosine.

// llamaCppGraph is what the host ops need to know of an architecture's llama.cpp graph beyond the decoder's own
// structure.
type llamaCppGraph struct {
	// interleaved: llama.cpp holds the q and k rows in rotary pairs (rope type NORM; its converter permutes
	// them), so each score sums its terms in that order; else in the Hugging Face halves (NEOX).
	interleaved bool
	// configScale: the attention scale is the config's (Granite's attention_multiplier), not llama.cpp's
	// 1.0f/sqrtf(head_dim).
	configScale bool
}

// llamaCppGraphs are the architectures whose llama.cpp graph the host ops reproduce, each checked against
// llama.cpp's logits (TestLlamaCppArithmeticFamilies).
var llamaCppGraphs = map[string]*llamaCppGraph{
	"LlamaForCausalLM":   {interleaved: true},
	"SmolLM3ForCausalLM": {interleaved: true},
	"GraniteForCausalLM": {interleaved: true, configScale: true},
	"Qwen2ForCausalLM":   {},
	"Qwen3ForCausalLM":   {},
	"Olmo2ForCausalLM":   {},
	// The mixtures of experts (llama.cpp's build_moe_ffn: routeRow; its mul_mat_id: llamaCppExperts).
	"MixtralForCausalLM":   {interleaved: true},
	"Qwen2MoeForCausalLM":  {},
	"Qwen3MoeForCausalLM":  {},
	"OlmoeForCausalLM":     {},
	"Glm4MoeForCausalLM":   {},
	"MiniMaxM2ForCausalLM": {},
}

// checkLlamaCpp refuses, by name, what Arithmetic llama.cpp does not reproduce.
func checkLlamaCpp(s *weightStore) error {
	var tensors []checkpoint.TensorInfo
	for _, u := range s.set.Units() {
		for _, t := range u.Tensors {
			tensors = append(tensors, checkpoint.TensorInfo{Name: t.Name, DType: t.DType, Shape: t.Shape})
		}
	}
	if err := checkLlamaCppModel(s.cfg, s.plan, tensors, s.headUnit == unitEmbed); err != nil {
		return err
	}
	if s.computeDType != checkpoint.F32 {
		return fmt.Errorf("compute dtype %s is not covered: llama.cpp multiplies float32 matrices in float32 (use --dtype f32 or auto)", s.computeDType)
	}
	return nil
}

// llamaCppRefusal is the error of a model Arithmetic llama.cpp refuses for err, pointing to TROUBLESHOOTING.md.
func llamaCppRefusal(err error) error {
	return fmt.Errorf("arithmetic %s: %w (see %s)", ArithmeticLlamaCpp, err, sections.Anchor(sections.LlamaCpp))
}

// checkLlamaCppSource is checkLlamaCpp's checks on a checkpoint before it is split, so that a file Arithmetic
// llama.cpp refuses is refused before the first-use split rather than after it: its architecture, configuration
// and tensor types, and a compute dtype other than float32 asked for by name (dtype: Options.DType). The plan's
// checks wait for Open where the engine does not know the architecture (Open refuses it then, as it would anyway).
func checkLlamaCppSource(ck *checkpoint.Checkpoint, dtype string) error {
	var plan *model.Plan
	if arch, err := model.For(ck.Config); err == nil {
		plan = arch.Plan()
	}
	tied := ck.Config.TieWordEmbeddings && !slices.ContainsFunc(ck.Tensors, func(t checkpoint.TensorInfo) bool { return t.Name == lmHeadWeight })
	if err := checkLlamaCppModel(ck.Config, plan, ck.Tensors, tied); err != nil {
		return err
	}
	// The device's own caps are not known before the split; an explicit request is refused whatever they are.
	if c, err := guard.ChooseDType(dtype, ck.Config.TorchDType, guard.DeviceCaps{}); err == nil && c.DType != checkpoint.F32 {
		return fmt.Errorf("compute dtype %s is not covered: llama.cpp multiplies float32 matrices in float32 (use --dtype f32 or auto)", c.DType)
	}
	return nil
}

// llamaCppUncovered says why Arithmetic llama.cpp does not cover an architecture layerstream reads from llama.cpp's
// GGUF files in its own arithmetic.
var llamaCppUncovered = map[string]string{
	"DeepseekV3ForCausalLM": "multi-head latent attention: llama.cpp's deepseek2 graph (its attn_k_b and attn_v_b products around an attention over the latent, in its order of sums, and its yarn rope with the scale it folds into the scores) is not reproduced; the engine's arithmetic gives its logits within 1e-4",
}

// checkLlamaCppModel refuses, by name, what Arithmetic llama.cpp does not reproduce in a model: its
// architecture and configuration (c, and plan when not nil) and the types of its matrices (tensors; tied: the
// output head is the embedding).
func checkLlamaCppModel(c *checkpoint.Config, plan *model.Plan, tensors []checkpoint.TensorInfo, tied bool) error {
	name := ""
	if len(c.Architectures) > 0 {
		name = c.Architectures[0]
	}
	if why, ok := llamaCppUncovered[name]; ok {
		return fmt.Errorf("architecture %s is not covered: %s", name, why)
	}
	if llamaCppGraphs[name] == nil {
		return fmt.Errorf("architecture %s is not covered (covered: %s)", name, strings.Join(slices.Sorted(maps.Keys(llamaCppGraphs)), ", "))
	}
	if c.HiddenAct != "silu" && c.HiddenAct != "swish" {
		return fmt.Errorf("hidden_act %q is not covered (covered: silu)", c.HiddenAct)
	}
	var layers []model.LayerKind
	var ropes []model.Rope
	if plan != nil {
		layers, ropes = plan.Layers, plan.Ropes
	}
	for i, k := range layers {
		if k.Chunk != 0 {
			return fmt.Errorf("layer %d attends within chunks of %d: llama.cpp's chunked attention is not reproduced", i, k.Chunk)
		}
		if k.Window != 0 {
			return fmt.Errorf("layer %d has a sliding window of %d: llama.cpp's sliding-window cache is not reproduced", i, k.Window)
		}
	}
	for _, r := range ropes {
		switch p := r.Params; {
		case p.Type == "default", p.Type == "linear":
		case p.Type == "longrope" && slices.Equal(p.ShortFactor, p.LongFactor):
			// One set of factors for every length: llama.cpp's rope_freqs (GGUF files of Llama 3.1 and later),
			// which it applies without an attention factor.
			if _, scale := r.Frequencies(c.MaxPositionEmbeddings); scale != 1 {
				return fmt.Errorf("frequency factors with an attention factor of %g are not covered (llama.cpp's rope_freqs have none)", scale)
			}
		default:
			return fmt.Errorf("rope type %q is not covered (covered: default, linear, and frequency factors)", p.Type)
		}
		if r.Dims != c.HeadDim && llamaCppGraphs[name].interleaved {
			return fmt.Errorf("partial rotary embeddings (%d of %d dimensions) are not covered in rotary pairs", r.Dims, c.HeadDim)
		}
	}
	for _, w := range []struct {
		key string
		n   int
	}{{"intermediate_size", c.IntermediateSize}, {"moe_intermediate_size", c.MoEIntermediateSize}, {"shared_expert_intermediate_size", c.SharedExpertIntermediateSize}} {
		if w.n != 0 && !ggml.SwiGLUWidth(w.n) {
			return fmt.Errorf("%s %d is not a multiple of 16: llama.cpp computes the rest of each row with the C library's expf, which is not reproduced", w.key, w.n)
		}
	}
	for _, t := range tensors {
		if len(t.Shape) != 2 || t.Name == embedWeight && !tied {
			continue // vectors are added or multiplied elementwise; an untied embedding is only looked up
		}
		name := t.Name
		if name == embedWeight {
			name += " (the output head, tied to the embedding)"
		}
		switch {
		case t.DType.Quantized():
			q, _ := t.DType.Quant()
			if err := kernels.GGMLSupports(q); err != nil {
				return fmt.Errorf("tensor %s: %w", name, err)
			}
		case t.DType != checkpoint.F32:
			return fmt.Errorf("tensor %s is %s: llama.cpp's arithmetic is reproduced for float32 matrices and the Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K to Q6_K, IQ1_S to IQ3_S, IQ4_NL and IQ4_XS block formats", name, t.DType)
		}
	}
	return nil
}

// llamaCppRotaryTable is rotaryTable as ggml computes its rotary cache (ggml.RopeAngles): [tb, dims] cosines
// and sines for positions pos0…pos0+tb-1, each pair's value at j and j+dims/2 (the Hugging Face layout).
func llamaCppRotaryTable(r model.Rope, pos0, tb int) (cos, sin []float32) {
	d := r.Dims
	half := d / 2
	freqScale := float32(1)
	var factors []float32
	switch r.Params.Type {
	case "linear":
		freqScale = 1 / float32(r.Params.Factor)
	case "longrope": // one set of factors and no attention factor (checkLlamaCpp): llama.cpp's freq_factors
		for _, f := range r.Params.ShortFactor {
			factors = append(factors, float32(f))
		}
	}
	ts := ggml.ThetaScale(float32(r.Params.Theta), d)
	cos, sin = make([]float32, tb*d), make([]float32, tb*d)
	for t := range tb {
		c, s := cos[t*d:(t+1)*d], sin[t*d:(t+1)*d]
		ggml.RopeAngles(c[:half], s[:half], pos0+t, ts, freqScale, 1, factors)
		copy(c[half:], c[:half])
		copy(s[half:], s[:half])
	}
	return cos, sin
}

// llamaCppOutputRows are the weights of the last decoder layer (weights) that llama.cpp multiplies row by row
// when it keeps only the last position's logits: its graph drops the other rows after the attention's output
// projection (ggml_get_rows with inp_out_ids), so the MLP of a pass that generates (a mixture of experts' router,
// experts and shared expert too) sees one row per sequence, for which it takes its single-row kernels (tinyBLAS
// and its tiled K-quant path decline it).
func llamaCppOutputRows(w *model.LayerWeights) []model.Value {
	var rows []model.Value
	for _, v := range []model.Value{w.Gate.W, w.Up.W, w.Down.W, w.Router.W, w.SharedGate.W, w.Shared.Gate.W, w.Shared.Up.W, w.Shared.Down.W} {
		if v != nil {
			rows = append(rows, v)
		}
	}
	return rows
}

// llamaCppExperts are a layer's routed experts' matrices, which llama.cpp multiplies with mul_mat_id: each
// expert by the rows of a sequence routed to it (runs: their counts per sequence, in order, set by hostOps.Rows
// for the expert being computed), with its tiled K-quant kernel where those are 8 rows or more and the matrix is
// not repacked, else each row alone (ggml_vec_dot, or its repacked gemv), never tinyBLAS
// (kernels.GGMLExpertBatch). alone: the last layer of a pass that keeps only the last position's logits, where
// llama.cpp routes one row per sequence.
type llamaCppExperts struct {
	weights []model.Value
	runs    []int
	alone   bool
}

// newLlamaCppExperts lists the routed experts' matrices of w.
func newLlamaCppExperts(w *model.LayerWeights, alone bool) *llamaCppExperts {
	x := &llamaCppExperts{alone: alone}
	for _, e := range w.Experts {
		x.weights = append(x.weights, e.Gate.W, e.Up.W, e.Down.W)
	}
	return x
}

// expertLinear is llamaCppLinear of a routed expert's block-quantized matrix (see llamaCppExperts).
func (o hostOps) expertLinear(y, x *hostArray, f kernels.QuantMatrix, bias []float32) {
	repacks := kernels.GGMLRepacks(f.Type, f.Rows)
	at := 0
	for _, n := range o.experts.runs {
		batch := 1
		if !o.experts.alone {
			batch = kernels.GGMLExpertBatch(f.Type, repacks, n)
		}
		kernels.LinearQuantGGML(y.data[at*f.Rows:(at+n)*f.Rows], x.data[at*f.Cols:(at+n)*f.Cols], f, bias, batch, repacks)
		at += n
	}
}

// llamaCppLinear is Linear with llama.cpp's products: block formats as its kernels do (kernels.LinearQuantGGML: its
// vec_dot, repacked, tinyBLAS and tiled kernels by format, repacking and batch), float32 matrices as
// ggml_vec_dot_f32 in a batch of one token and tinyBLAS (its sgemm) in more (o.batch; kernels.LinearGGMLF32).
func (o hostOps) llamaCppLinear(x *hostArray, weight model.Value, bias []float32) *hostArray {
	batch := o.batch
	expert := o.experts != nil && slices.Contains(o.experts.weights, weight)
	if expert || slices.Contains(o.rowByRow, weight) {
		batch = 1 // a float32 matrix: ggml_vec_dot_f32 per row
	}
	switch f := weightData(weight).(type) {
	case kernels.QuantMatrix:
		y := o.arena.array(append(slices.Clone(x.dims[:len(x.dims)-1]), f.Rows)...)
		if expert {
			o.expertLinear(y, x, f, bias)
			return y
		}
		// llama.cpp repacks every matrix it multiplies that it can, a tied head included: it loads the embedding a
		// second time as the output tensor, into the repacking buffer.
		kernels.LinearQuantGGML(y.data, x.data, f, bias, batch, kernels.GGMLRepacks(f.Type, f.Rows))
		return y
	case []float32:
		in := x.dims[len(x.dims)-1]
		y := o.arena.array(append(slices.Clone(x.dims[:len(x.dims)-1]), len(f)/in)...)
		kernels.LinearGGMLF32(y.data, x.data, f, bias, in, batch)
		return y
	}
	panic(fmt.Sprintf("engine: arithmetic llama.cpp: Linear of a %T weight", weightData(weight)))
}

// interleave copies rows of d values from src (the Hugging Face rotary layout: pair i at i and i+d/2) to dst in
// the order llama.cpp's Llama graph holds them (pair i at 2i, 2i+1; its converter permutes the q and k rows so):
// the order of the terms of each score's dot product.
func interleave(dst, src []float32, d int) {
	half := d / 2
	for r := 0; r < len(src)/d; r++ {
		s, t := src[r*d:(r+1)*d], dst[r*d:(r+1)*d]
		for i := range half {
			t[2*i], t[2*i+1] = s[i], s[i+half]
		}
	}
}

// attnScratch holds llamaCppAttention's buffers between calls: a sequence's keys and values in position order,
// the float16 runs widened, the queries reordered.
type attnScratch struct{ k, v, wk, wv, q []float32 }

var llamaCppScratch = sync.Pool{New: func() any { return new(attnScratch) }}

// llamaCppAttention is Attention as ggml.Attention computes it, each sequence as llama.cpp evaluates it alone:
// its cached positions are gathered in order with the new ones (the cells of a sequence that started at cell
// 0), and the pass's new tokens are llama.cpp's batch.
func (o hostOps) llamaCppAttention(q, k, v *hostArray, opts model.AttentionOptions) *hostArray {
	// The new keys and values as the cache holds them: llama.cpp writes them first, then attends to the cache.
	o.kv.Round(k.data)
	o.kv.Round(v.data)
	slot, _ := o.kv.Layer(0)
	half := slot.K16 != nil
	b, heads, t, d := q.dims[0], q.dims[1], q.dims[2], q.dims[3]
	kvHeads := k.dims[1]
	group := heads / kvHeads
	s := o.kv.Slots()
	y := o.arena.array(b, t, heads*d)
	// What checkLlamaCpp keeps out: a window, soft-capping, another scale than llama.cpp's.
	if o.window != 0 || opts.SoftCap != 0 || opts.Sinks != nil || !o.llamaCpp.configScale && math.Abs(opts.Scale*math.Sqrt(float64(d))-1) > 1e-12 {
		panic(fmt.Sprintf("engine: arithmetic llama.cpp: attention with window %d, soft cap %g, scale %g is not reproduced", o.window, opts.SoftCap, opts.Scale))
	}
	scale := 1 / float32(math.Sqrt(float64(d))) // 1.0f/sqrtf(n_embd_head)
	if o.llamaCpp.configScale {
		scale = float32(opts.Scale)
	}
	order := func(dst, src []float32, d int) { copy(dst, src) }
	if o.llamaCpp.interleaved {
		order = interleave
	}
	kernels.ParallelFor(b*kvHeads, func(lo, hi int) {
		sc := llamaCppScratch.Get().(*attnScratch)
		defer llamaCppScratch.Put(sc)
		for job := lo; job < hi; job++ {
			bi, g := job/kvHeads, job%kvHeads
			row := o.row(bi)
			past := o.past[bi]
			n := past + t
			sc.k, sc.v = grow.Slice(sc.k, n*d), grow.Slice(sc.v, n*d)
			ks, vs := sc.k, sc.v
			base := (row*kvHeads + g) * s * d
			for _, c := range o.kv.Runs(row, past) {
				from, to := base+c.Slot*d, base+(c.Slot+c.N)*d
				var kc, vc []float32
				if half {
					sc.wk, sc.wv = grow.Slice(sc.wk, to-from), grow.Slice(sc.wv, to-from)
					kc, vc = sc.wk, sc.wv
					quant.WidenHalves(kc, slot.K16[from:to])
					quant.WidenHalves(vc, slot.V16[from:to])
				} else {
					kc, vc = slot.K[from:to], slot.V[from:to]
				}
				order(ks[c.Pos*d:(c.Pos+c.N)*d], kc, d)
				copy(vs[c.Pos*d:(c.Pos+c.N)*d], vc)
			}
			nw := (bi*kvHeads + g) * t * d
			order(ks[past*d:], k.data[nw:nw+t*d], d)
			copy(vs[past*d:], v.data[nw:nw+t*d])
			sc.q = grow.Slice(sc.q, group*t*d)
			qh := sc.q
			order(qh, q.data[(bi*heads+g*group)*t*d:][:group*t*d], d)
			out := y.data[bi*t*heads*d+g*group*d:]
			ggml.Attention(out, heads*d, qh, ks, vs, group, t, past, d, scale, t, half)
		}
	})
	return y
}
