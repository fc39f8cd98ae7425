package engine

import (
	"context"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"unsafe"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/layerstream/layerstream/engine/kernels"
	"github.com/layerstream/layerstream/engine/model"
	"github.com/layerstream/layerstream/internal/hffixture"
	"github.com/layerstream/layerstream/kvcache"
	"github.com/layerstream/layerstream/quant"
	"github.com/layerstream/layerstream/shards"
	"github.com/layerstream/layerstream/synth"
)

// TestLatentCache: DeepSeek-V3's layers keep the compressed latent and the rotated shared key in the cache, one
// array per layer (values are keys): on the deepseek_v3 fixture, every layer's cache is latent, its values the
// same memory as its keys, kv_lora_rank + qk_rope_head_dim = 40 elements per position, half the bytes of two
// arrays. With a float16 cache the logits stay within 0.02 of transformers' (and differ: the option is not
// ignored), a prompt prefilled in one pass gives what it gives a token at a time, and the greedy ids are
// transformers'.
func TestLatentCache(t *testing.T) {
	dir := hffixture.Checkpoint(t, "deepseek_v3", hffixture.V5)
	ref := hffixture.MustReference(t, "deepseek_v3")
	ids := ints(ref.InputIDs)
	want := ref.Rows()
	for _, half := range []bool{false, true} {
		opts := Options{}
		if half {
			opts.KVCache = KVCacheF16
		}
		e := open(t, dir, opts)
		got := tokenByToken(t, e, ids)
		c := e.run.kv.Config()
		if c.KVHeads != 1 || c.HeadDim != 40 || c.Half != half || len(c.Latent) != 3 || slices.Contains(c.Latent, false) {
			t.Fatalf("cache %+v: want latent layers of one head of 40, Half %v", c, half)
		}
		two := c
		two.Latent = nil
		if c.Bytes()*2 != two.Bytes() {
			t.Errorf("latent cache of %d bytes, %d with values apart: want half", c.Bytes(), two.Bytes())
		}
		s, _ := e.run.kv.View(1).Layer(0)
		if k, v := keyData(s, half), valueData(s, half); k == nil || k != v {
			t.Errorf("layer 1 (half %v): values at %p, keys at %p: want the same array", half, v, k)
		}
		d := maxDiff(got, want)
		t.Logf("float16 cache %v: largest logit difference from transformers' %.2g", half, d)
		switch {
		case !half && d > hfTolerance:
			t.Errorf("float32 cache: logits differ from transformers' by %g", d)
		case half && (d > 0.02 || d <= hfTolerance):
			t.Errorf("float16 cache: logits differ from transformers' by %g, want (%g, 0.02]", d, hfTolerance)
		}
		if d := maxDiff(got[9:], prefillDecode(t, e, ids, 10)[9:]); d > 1e-5 {
			t.Errorf("float16 cache %v: a prompt prefilled in one pass differs from token by token by %g", half, d)
		}
		res, err := e.Generate(context.Background(), Request{PromptIDs: ids, MaxNewTokens: len(ref.GreedyIDs), StopIDs: []int{}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.GeneratedIDs, ints(ref.GreedyIDs)) {
			t.Errorf("float16 cache %v: greedy ids %v, transformers' %v", half, res.GeneratedIDs, ints(ref.GreedyIDs))
		}
	}
}

// keyData and valueData are the first element's address of a layer's keys and values (nil for none).
func keyData(s *kvcache.Slot, half bool) unsafe.Pointer {
	if half {
		return unsafe.Pointer(unsafe.SliceData(s.K16))
	}
	return unsafe.Pointer(unsafe.SliceData(s.K))
}

func valueData(s *kvcache.Slot, half bool) unsafe.Pointer {
	if half {
		return unsafe.Pointer(unsafe.SliceData(s.V16))
	}
	return unsafe.Pointer(unsafe.SliceData(s.V))
}

// TestLatentDraftGreedyUnchanged: speculative decoding over a latent cache (n-gram drafts, verified and cut back
// out of the cache; batched; a session's next turn continuing the cache) keeps greedy output unchanged.
func TestLatentDraftGreedyUnchanged(t *testing.T) {
	checkDraftGreedy(t, hffixture.Checkpoint(t, "deepseek_v3", hffixture.V5), DraftNgram)
}

// TestDeepSeekSynth: synth's DeepSeek-V3 shape, shrunk, opens and computes as the float64 reference does (one
// pass on the graphs, token by token on the host kernels); split into q4 shards (block-quantized k_b_proj and v_b_proj,
// multiplied per head as quantized rows), the host kernels' logits stay near the graphs' (which widen the blocks to
// float32 and multiply in float32).
func TestDeepSeekSynth(t *testing.T) {
	shape := synth.Shape{HiddenSize: 64, IntermediateSize: 96, NumLayers: 3, NumHeads: 4, VocabSize: 300,
		MaxPositionEmbeddings: 64, RMSNormEps: 1e-6, BOSTokenID: 1, EOSTokenID: 2,
		DeepSeek: &synth.DeepSeek{QLoraRank: 32, KVLoraRank: 64, QKNopeHeadDim: 16, QKRopeHeadDim: 8, VHeadDim: 16,
			Experts: 8, ExpertsPerTok: 2, MoEIntermediateSize: 32, SharedExperts: 1, Groups: 4, TopGroups: 2, FirstDense: 1,
			RoutedScaling: 2.5, Factor: 4, OriginalContext: 16}}
	dir := writeTiny(t, synth.Options{Shape: shape, Seed: 11})
	want := referenceLogits(t, dir, familyIDs)
	e := open(t, dir, Options{})
	got, err := e.Logits(context.Background(), familyIDs)
	if err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(got, want); d > 1e-4 {
		t.Errorf("one pass (graphs) differs from the float64 reference by %g", d)
	}
	if d := maxDiff(tokenByToken(t, e, familyIDs), want); d > 1e-4 {
		t.Errorf("token by token (host kernels) differs from the float64 reference by %g", d)
	}
	q4 := filepath.Join(t.TempDir(), "q4")
	qck, err := synth.Quantized(q4, synth.Options{Shape: shape, Seed: 11, Std: 0.2}, shards.Q4.Target)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := shards.Split(context.Background(), qck, shards.SplitOptions{Out: q4}); err != nil {
		t.Fatal(err)
	}
	host, graphs := tokenByToken(t, open(t, q4, Options{}), familyIDs), tokenByToken(t, open(t, q4, Options{GraphDecode: true}), familyIDs)
	d := maxDiff(host, graphs)
	t.Logf("q4 shards: host kernels against graphs %.2g", d)
	if d > 0.5 { // a Llama of the same size and q4 shards: 0.32 (the host kernels round activations to 8 bits)
		t.Errorf("q4 shards: the host kernels' logits differ from the graphs' by %g", d)
	}
}

// TestHeadLinear: hostOps.HeadLinear multiplies each head by its rows of a float32, bf16 and Q8_0 weight as a
// float64 product of the (dequantized) weight does; products of Q8_0 rows, which round their inputs to 8 bits as
// every product of a block-quantized weight on the host kernels, give bit for bit what Linear gives with those
// rows.
func TestHeadLinear(t *testing.T) {
	const heads, n, in, b, tt = 3, 5, 64, 2, 2
	rng := rand.New(rand.NewPCG(3, 4))
	w := make([]float32, heads*n*in)
	for i := range w {
		w[i] = float32(rng.NormFloat64())
	}
	q := make([]byte, heads*n*in/32*34)
	if err := quant.Quantize(quant.Q8_0, q, w); err != nil {
		t.Fatal(err)
	}
	qm, err := kernels.NewQuantMatrix(quant.Q8_0, q, heads*n, in)
	if err != nil {
		t.Fatal(err)
	}
	wq := make([]float32, len(w))
	if err := quant.Dequantize(quant.Q8_0, wq, q); err != nil {
		t.Fatal(err)
	}
	bf := make([]bfloat16.BFloat16, len(w))
	wb := make([]float32, len(w))
	for i, v := range w {
		bf[i] = bfloat16.FromFloat32(v)
		wb[i] = bf[i].Float32()
	}
	shape := shapes.Make(dtypes.Float32, heads*n, in)
	for _, c := range []struct {
		name  string
		flat  any
		exact []float32 // the weights it holds, as float32
	}{{"f32", w, w}, {"bf16", bf, wb}, {"q8_0", qm, wq}} {
		x := newHostArray(b, heads, tt, in)
		for i := range x.data {
			x.data[i] = float32(rng.NormFloat64())
		}
		y := arr(hostOps{}.HeadLinear(x, &deviceTensor{flat: c.flat, shape: shape}))
		if c.name == "q8_0" {
			for h := range heads {
				rows := &deviceTensor{flat: qm.RowRange(h*n, n), shape: shapes.Make(dtypes.Float32, n, in)}
				for bi := range b {
					at := (bi*heads + h) * tt
					xh := &hostArray{data: x.data[at*in : (at+tt)*in], dims: []int{tt, in}}
					if want := arr(hostOps{}.Linear(xh, rows, nil)).data; !slices.Equal(y.data[at*n:(at+tt)*n], want) {
						t.Errorf("q8_0 head %d row %d: %v, Linear of its rows %v", h, bi, y.data[at*n:(at+tt)*n], want)
					}
				}
			}
			continue
		}
		worst := 0.0
		for r := range b * heads * tt {
			h := r / tt % heads
			for o := range n {
				var want float64
				for i := range in {
					want += float64(c.exact[(h*n+o)*in+i]) * float64(x.data[r*in+i])
				}
				worst = max(worst, math.Abs(float64(y.data[r*n+o])-want))
			}
		}
		if worst > 1e-4 {
			t.Errorf("%s: differs from the float64 product by %g", c.name, worst)
		}
	}
}

// BenchmarkHeadLinear is the absorbed kv_b_proj of one DeepSeek-V3 layer at one decode step (128 heads,
// kv_lora_rank 512) as q4 shards hold it: its key part k_b_proj [128·512, 128] (each head's rows transposed at
// split time; rows of 128 are too short for Q4_K's 256, so shards.Q4 stores them in Q4_1) and its value part
// v_b_proj [128·128, 512] in Q4_K.
func BenchmarkHeadLinear(b *testing.B) {
	const heads, nope, v, rank = 128, 128, 128, 512
	rng := rand.New(rand.NewPCG(1, 2))
	weight := func(typ quant.Type, rows, in int) *deviceTensor {
		w := make([]float32, rows*in)
		for i := range w {
			w[i] = float32(rng.NormFloat64()) * 0.02
		}
		f, _ := typ.Format()
		q := make([]byte, rows*in/f.BlockElems*f.BlockBytes)
		if err := quant.Quantize(typ, q, w); err != nil {
			b.Fatal(err)
		}
		qm, err := kernels.NewQuantMatrix(typ, q, rows, in)
		if err != nil {
			b.Fatal(err)
		}
		return &deviceTensor{flat: qm, shape: shapes.Make(dtypes.Float32, rows, in)}
	}
	b.Run("keys", func(b *testing.B) {
		w, x := weight(quant.Q4_1, heads*rank, nope), newHostArray(1, heads, 1, nope)
		for b.Loop() {
			hostOps{}.HeadLinear(x, w)
		}
	})
	b.Run("values", func(b *testing.B) {
		w, x := weight(quant.Q4_K, heads*v, rank), newHostArray(1, heads, 1, rank)
		for b.Loop() {
			hostOps{}.HeadLinear(x, w)
		}
	})
}

// BenchmarkLatentAttention is one decode step's attention of a DeepSeek-V3 layer over a latent cache of 4,095
// positions in float16: 128 query heads of kv_lora_rank + qk_rope_head_dim = 576 against one key/value head.
func BenchmarkLatentAttention(b *testing.B) {
	const heads, d, past = 128, 576, 4095
	kv, err := kvcache.New(kvcache.Config{Layers: 1, Batch: 1, KVHeads: 1, Capacity: past + 1, HeadDim: d, Latent: []bool{true}, Half: true}, nil)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	fill := func(x []float32) {
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
	}
	keys := make([]float32, past*d)
	fill(keys)
	if err := kv.View(0).Write(0, past, past, keys, keys); err != nil {
		b.Fatal(err)
	}
	if err := kv.Advance(0, past); err != nil {
		b.Fatal(err)
	}
	q, k := newHostArray(1, heads, 1, d), newHostArray(1, 1, 1, d)
	fill(q.data)
	fill(k.data)
	var werr error
	for b.Loop() {
		o := hostOps{kv: kv.View(0), past: []int{past}, pos: [][]int{{past}}, err: &werr}
		o.Attention(q, k, k, model.AttentionOptions{Scale: 1 / math.Sqrt(192)})
		if werr != nil {
			b.Fatal(werr)
		}
	}
}
