// Package synth writes seeded synthetic Hugging Face checkpoints (Llama layout, or Qwen3.5's hybrid; random
// weights) at real model shapes, for benchmarks and for tests that need a model of a given size but not a trained one.
//
// Weights are N(0, Std) (norm weights 1.0), generated in fixed-size chunks, each chunk from its own PRNG seeded
// by (seed, tensor, chunk). The output therefore depends only on the options, never on the number of goroutines,
// and no tensor is ever held whole in memory: chunks go through a few reused buffers straight into the file.
package synth

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/internal/atomicfile"
)

// Shape is a Llama-family model's dimensions.
type Shape struct {
	HiddenSize, IntermediateSize, NumLayers int
	NumHeads, NumKVHeads                    int
	// HeadDim defaults to HiddenSize/NumHeads.
	HeadDim   int
	VocabSize int
	// TieEmbeddings writes tie_word_embeddings=true and no lm_head.weight.
	TieEmbeddings         bool
	MaxPositionEmbeddings int     // default 2048
	RopeTheta             float64 // default 10000
	RMSNormEps            float64 // default 1e-5
	BOSTokenID            int
	EOSTokenID            int
	// A mixture of experts (NumExperts > 0) is a Qwen3-MoE model: q/k norms, and every layer's MLP a router and
	// NumExperts experts of width MoEIntermediateSize, each token routed to NumExpertsPerTok of them.
	NumExperts, NumExpertsPerTok, MoEIntermediateSize int
	// DeepSeek, when set, makes the shape a DeepSeek-V3 rather than a Llama (deepseek.go); NumKVHeads is then
	// NumHeads and HeadDim unused.
	DeepSeek *DeepSeek
	// Hybrid, when set, makes the shape a Qwen3.5 text model (Qwen3_5ForCausalLM) rather than a Llama (qwen35.go).
	Hybrid *Hybrid
	// GptOss, when set, makes the shape a gpt-oss model (GptOssForCausalLM, MXFP4 experts) rather than a Llama
	// (gptoss.go).
	GptOss *GptOss
}

// Shapes are the named real-model shapes the `synth` command knows.
var Shapes = map[string]Shape{
	"smollm2-135m": {HiddenSize: 576, IntermediateSize: 1536, NumLayers: 30, NumHeads: 9, NumKVHeads: 3,
		VocabSize: 49152, TieEmbeddings: true, MaxPositionEmbeddings: 8192, RopeTheta: 100000, RMSNormEps: 1e-5,
		BOSTokenID: 0, EOSTokenID: 0},
	"tinyllama-1.1b": {HiddenSize: 2048, IntermediateSize: 5632, NumLayers: 22, NumHeads: 32, NumKVHeads: 4,
		VocabSize: 32000, MaxPositionEmbeddings: 2048, RopeTheta: 10000, RMSNormEps: 1e-5, BOSTokenID: 1, EOSTokenID: 2},
	"llama3-70b": {HiddenSize: 8192, IntermediateSize: 28672, NumLayers: 80, NumHeads: 64, NumKVHeads: 8,
		VocabSize: 128256, MaxPositionEmbeddings: 8192, RopeTheta: 500000, RMSNormEps: 1e-5, BOSTokenID: 128000,
		EOSTokenID: 128001},
	"qwen3-30b-a3b": {HiddenSize: 2048, IntermediateSize: 6144, NumLayers: 48, NumHeads: 32, NumKVHeads: 4, HeadDim: 128,
		VocabSize: 151936, MaxPositionEmbeddings: 40960, RopeTheta: 1e6, RMSNormEps: 1e-6, BOSTokenID: 151643,
		EOSTokenID: 151645, NumExperts: 128, NumExpertsPerTok: 8, MoEIntermediateSize: 768},
	"llama2-7b": {HiddenSize: 4096, IntermediateSize: 11008, NumLayers: 32, NumHeads: 32, NumKVHeads: 32,
		VocabSize: 32000, MaxPositionEmbeddings: 4096, RopeTheta: 10000, RMSNormEps: 1e-5, BOSTokenID: 1, EOSTokenID: 2},
	"deepseek-v3-671b": deepseekV3,
	"qwen3.5-9b":       qwen35Dense,
	"gpt-oss-120b":     gptOss120b,
}

// ShapeNames lists the names in Shapes, sorted.
func ShapeNames() []string {
	names := make([]string, 0, len(Shapes))
	for n := range Shapes {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Options configure Write.
type Options struct {
	Shape Shape
	// DType is checkpoint.BF16 (default) or checkpoint.F32.
	DType checkpoint.DType
	Seed  uint64
	// Std is the standard deviation of the weights (default 0.02); Scale multiplies every non-norm weight
	// (default 1; guard tests use huge values to provoke overflow).
	Std, Scale float64
	// DropLMHead omits lm_head.weight even though the config says the embeddings are not tied: a deliberately
	// broken checkpoint.
	DropLMHead bool
	// TensorScale multiplies the named tensors by a factor (NaN makes them all NaN): a deliberately broken layer,
	// e.g. {"model.layers.2.mlp.down_proj.weight": 1e30}. Naming a tensor the checkpoint lacks is an error.
	TensorScale map[string]float64
	// Tokenizer is a tokenizer.json to copy into the checkpoint; a tokenizer_config.json beside it is copied too.
	Tokenizer string
	// MaxFileBytes caps each safetensors file (default 2 GB; a tensor larger than the cap gets a file of its own).
	MaxFileBytes int64
}

// tensorSpec is one tensor to generate.
type tensorSpec struct {
	name  string
	shape []int64
	ones  bool    // a norm weight: all 1.0
	scale float64 // Options.TensorScale's factor, else 1
	// bytes, when set, makes the tensor U8 (an MXFP4 pair's half, gptoss.go): random bytes (fill 0) or every
	// byte fill.
	bytes bool
	fill  byte
}

// size is the tensor's bytes with elements of es bytes (U8 tensors: one byte each).
func (t tensorSpec) size(es int64) int64 {
	if t.bytes {
		return t.elems()
	}
	return t.elems() * es
}

// dtype is the tensor's safetensors dtype, d for a float tensor.
func (t tensorSpec) dtype(d checkpoint.DType) checkpoint.DType {
	if t.bytes {
		return checkpoint.U8
	}
	return d
}

func (t tensorSpec) elems() int64 {
	n := int64(1)
	for _, d := range t.shape {
		n *= d
	}
	return n
}

// tensors lists the checkpoint's tensors in Hugging Face order.
func (o *Options) tensors() []tensorSpec {
	s := o.Shape
	h, hd := int64(s.HiddenSize), int64(s.HeadDim)
	out := []tensorSpec{{name: "model.embed_tokens.weight", shape: []int64{int64(s.VocabSize), h}}}
	for l := range s.NumLayers {
		p := fmt.Sprintf("model.layers.%d.", l)
		if s.DeepSeek != nil {
			out = append(out, s.deepseekLayer(p, l)...)
			continue
		}
		if s.Hybrid != nil {
			out = append(out, s.hybridLayer(p, l)...)
			continue
		}
		if s.GptOss != nil {
			out = append(out, s.gptossLayer(p)...)
			continue
		}
		out = append(out,
			tensorSpec{name: p + "input_layernorm.weight", shape: []int64{h}, ones: true},
			tensorSpec{name: p + "self_attn.q_proj.weight", shape: []int64{int64(s.NumHeads) * hd, h}},
			tensorSpec{name: p + "self_attn.k_proj.weight", shape: []int64{int64(s.NumKVHeads) * hd, h}},
			tensorSpec{name: p + "self_attn.v_proj.weight", shape: []int64{int64(s.NumKVHeads) * hd, h}},
			tensorSpec{name: p + "self_attn.o_proj.weight", shape: []int64{h, int64(s.NumHeads) * hd}},
			tensorSpec{name: p + "post_attention_layernorm.weight", shape: []int64{h}, ones: true},
		)
		out = append(out, s.mlp(p)...)
	}
	out = append(out, tensorSpec{name: "model.norm.weight", shape: []int64{h}, ones: true})
	if !s.TieEmbeddings && !o.DropLMHead {
		out = append(out, tensorSpec{name: "lm_head.weight", shape: []int64{int64(s.VocabSize), h}})
	}
	for i := range out {
		out[i].scale = 1
		if f, ok := o.TensorScale[out[i].name]; ok {
			out[i].scale = f
		}
	}
	return out
}

// mlp lists the MLP tensors of the layer named by prefix p: a dense MLP, or a mixture of experts's router and
// experts with the attention's q/k norms (Qwen3-MoE).
func (s Shape) mlp(p string) []tensorSpec {
	h := int64(s.HiddenSize)
	if s.NumExperts == 0 {
		return []tensorSpec{
			{name: p + "mlp.gate_proj.weight", shape: []int64{int64(s.IntermediateSize), h}},
			{name: p + "mlp.up_proj.weight", shape: []int64{int64(s.IntermediateSize), h}},
			{name: p + "mlp.down_proj.weight", shape: []int64{h, int64(s.IntermediateSize)}},
		}
	}
	hd, in := int64(s.HeadDim), int64(s.MoEIntermediateSize)
	out := []tensorSpec{
		{name: p + "self_attn.q_norm.weight", shape: []int64{hd}, ones: true},
		{name: p + "self_attn.k_norm.weight", shape: []int64{hd}, ones: true},
		{name: p + "mlp.gate.weight", shape: []int64{int64(s.NumExperts), h}},
	}
	for e := range s.NumExperts {
		q := fmt.Sprintf("%smlp.experts.%d.", p, e)
		out = append(out, tensorSpec{name: q + "gate_proj.weight", shape: []int64{in, h}},
			tensorSpec{name: q + "up_proj.weight", shape: []int64{in, h}},
			tensorSpec{name: q + "down_proj.weight", shape: []int64{h, in}})
	}
	return out
}

func (o *Options) fillDefaults() error {
	s := &o.Shape
	if s.HeadDim == 0 && s.NumHeads > 0 {
		s.HeadDim = s.HiddenSize / s.NumHeads
	}
	if s.NumKVHeads == 0 {
		s.NumKVHeads = s.NumHeads
	}
	if s.MaxPositionEmbeddings == 0 {
		s.MaxPositionEmbeddings = 2048
	}
	if s.RopeTheta == 0 {
		s.RopeTheta = 10000
	}
	if s.RMSNormEps == 0 {
		s.RMSNormEps = 1e-5
	}
	if o.DType == "" {
		o.DType = checkpoint.BF16
	}
	if o.DType != checkpoint.BF16 && o.DType != checkpoint.F32 {
		return fmt.Errorf("synth: dtype %q is not supported (supported: BF16, F32)", o.DType)
	}
	if o.Std == 0 {
		o.Std = 0.02
	}
	if o.Scale == 0 {
		o.Scale = 1
	}
	if o.MaxFileBytes <= 0 {
		o.MaxFileBytes = 2_000_000_000
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"hidden size", s.HiddenSize}, {"intermediate size", s.IntermediateSize}, {"layers", s.NumLayers},
		{"heads", s.NumHeads}, {"kv heads", s.NumKVHeads}, {"head dim", s.HeadDim}, {"vocab size", s.VocabSize}} {
		if f.v <= 0 {
			return fmt.Errorf("synth: %s must be positive, got %d", f.name, f.v)
		}
	}
	if s.NumHeads%s.NumKVHeads != 0 {
		return fmt.Errorf("synth: heads (%d) must be a multiple of kv heads (%d)", s.NumHeads, s.NumKVHeads)
	}
	for name := range o.TensorScale {
		if !slices.ContainsFunc(o.tensors(), func(t tensorSpec) bool { return t.name == name }) {
			return fmt.Errorf("synth: TensorScale names %q, which the checkpoint does not have", name)
		}
	}
	return nil
}

// Write generates a checkpoint into dir (created if needed): model-0000I-of-0000N.safetensors files,
// model.safetensors.index.json, config.json, generation_config.json and, with Options.Tokenizer, the tokenizer
// files. Files are written under temporary names and renamed, so a failed Write leaves no half-written file
// under a final name; config.json comes last, so a folder without it is incomplete.
func Write(dir string, opts Options) error {
	if err := opts.fillDefaults(); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	es := int64(opts.DType.Size())
	files := planFiles(opts.tensors(), es, opts.MaxFileBytes)
	g := newGenerator(&opts)
	weightMap := map[string]string{}
	var total int64
	for i, ts := range files {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(files))
		if err := atomicfile.Write(filepath.Join(dir, name), func(w io.Writer) error { return g.writeFile(w, ts) }); err != nil {
			return fmt.Errorf("synth: %s: %w", name, err)
		}
		for _, t := range ts {
			weightMap[t.name] = name
			total += t.size(es)
		}
	}
	index := map[string]any{"metadata": map[string]any{"total_size": total}, "weight_map": weightMap}
	if err := writeJSON(filepath.Join(dir, checkpoint.IndexFile), index); err != nil {
		return err
	}
	gen := map[string]any{"bos_token_id": opts.Shape.BOSTokenID, "eos_token_id": opts.Shape.EOSTokenID}
	if err := writeJSON(filepath.Join(dir, "generation_config.json"), gen); err != nil {
		return err
	}
	if opts.Tokenizer != "" {
		if err := copyFile(opts.Tokenizer, filepath.Join(dir, "tokenizer.json")); err != nil {
			return fmt.Errorf("synth: tokenizer: %w", err)
		}
		tc := filepath.Join(filepath.Dir(opts.Tokenizer), "tokenizer_config.json")
		if _, err := os.Stat(tc); err == nil {
			if err := copyFile(tc, filepath.Join(dir, "tokenizer_config.json")); err != nil {
				return fmt.Errorf("synth: tokenizer config: %w", err)
			}
		}
	}
	// config.json last: a folder that has one holds a complete checkpoint.
	return writeJSON(filepath.Join(dir, "config.json"), opts.config())
}

func (o *Options) config() map[string]any {
	s := o.Shape
	torchDType := map[checkpoint.DType]string{checkpoint.BF16: "bfloat16", checkpoint.F32: "float32"}[o.DType]
	cfg := map[string]any{
		"architectures":           []string{"LlamaForCausalLM"},
		"model_type":              "llama",
		"hidden_size":             s.HiddenSize,
		"intermediate_size":       s.IntermediateSize,
		"num_hidden_layers":       s.NumLayers,
		"num_attention_heads":     s.NumHeads,
		"num_key_value_heads":     s.NumKVHeads,
		"vocab_size":              s.VocabSize,
		"max_position_embeddings": s.MaxPositionEmbeddings,
		"rms_norm_eps":            s.RMSNormEps,
		"rope_theta":              s.RopeTheta,
		"hidden_act":              "silu",
		"tie_word_embeddings":     s.TieEmbeddings,
		"torch_dtype":             torchDType,
		"bos_token_id":            s.BOSTokenID,
		"eos_token_id":            s.EOSTokenID,
	}
	if s.HeadDim != s.HiddenSize/s.NumHeads || s.Hybrid != nil {
		cfg["head_dim"] = s.HeadDim
	}
	if s.NumExperts > 0 {
		cfg["architectures"], cfg["model_type"], cfg["head_dim"] = []string{"Qwen3MoeForCausalLM"}, "qwen3_moe", s.HeadDim
		cfg["num_experts"], cfg["num_experts_per_tok"], cfg["moe_intermediate_size"] = s.NumExperts, s.NumExpertsPerTok, s.MoEIntermediateSize
		cfg["norm_topk_prob"], cfg["decoder_sparse_step"], cfg["mlp_only_layers"] = true, 1, []int{}
	}
	if s.DeepSeek != nil {
		s.deepseekConfig(cfg)
	}
	if s.Hybrid != nil {
		s.hybridConfig(cfg)
	}
	if s.GptOss != nil {
		s.gptossConfig(cfg)
	}
	return cfg
}

// planFiles groups tensors, in order, into files of at most maxBytes of data.
func planFiles(ts []tensorSpec, elemSize, maxBytes int64) [][]tensorSpec {
	var files [][]tensorSpec
	var cur []tensorSpec
	var size int64
	for _, t := range ts {
		n := t.size(elemSize)
		if len(cur) > 0 && size+n > maxBytes {
			files = append(files, cur)
			cur, size = nil, 0
		}
		cur = append(cur, t)
		size += n
	}
	return append(files, cur)
}

// chunkElems is the number of values generated from one PRNG stream.
const chunkElems = 1 << 20

// generator produces tensor bytes chunk by chunk, in parallel, into reused buffers. Buffers are double-buffered:
// one batch (a chunk per worker) is written to the file while the next one is generated.
type generator struct {
	opts    *Options
	workers int
	bufs    [2][][]byte // per batch parity, one output buffer per worker
	vals    [][]float32 // one float32 scratch per worker
}

func newGenerator(o *Options) *generator {
	w := max(1, runtime.GOMAXPROCS(0))
	g := &generator{opts: o, workers: w}
	for range w {
		for p := range g.bufs {
			g.bufs[p] = append(g.bufs[p], make([]byte, chunkElems*o.DType.Size()))
		}
		g.vals = append(g.vals, make([]float32, chunkElems))
	}
	return g
}

// writeFile writes one safetensors file holding ts.
func (g *generator) writeFile(w io.Writer, ts []tensorSpec) error {
	es := int64(g.opts.DType.Size())
	header := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var off int64
	for _, t := range ts {
		n := t.size(es)
		header[t.name] = map[string]any{"dtype": string(t.dtype(g.opts.DType)), "shape": t.shape, "data_offsets": []int64{off, off + n}}
		off += n
	}
	hdr, err := json.Marshal(header)
	if err != nil {
		return err
	}
	// Pad the header with spaces to a multiple of 8 bytes, as the reference writer does, so data is aligned.
	if pad := (8 - len(hdr)%8) % 8; pad > 0 {
		hdr = append(hdr, strings.Repeat(" ", pad)...)
	}
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(len(hdr)))
	if _, err := w.Write(lenBuf[:]); err != nil {
		return err
	}
	if _, err := w.Write(hdr); err != nil {
		return err
	}
	for _, t := range ts {
		if err := g.writeTensor(w, t); err != nil {
			return fmt.Errorf("tensor %s: %w", t.name, err)
		}
	}
	return nil
}

// writeTensor generates t in batches of one chunk per worker and writes each batch, in chunk order, while the
// next batch is generated into the other half of the double buffer.
func (g *generator) writeTensor(w io.Writer, t tensorSpec) error {
	if t.bytes {
		return g.writeBytes(w, t)
	}
	total := t.elems()
	es := int64(g.opts.DType.Size())
	nChunks := (total + chunkElems - 1) / chunkElems
	tensorSeed := nameSeed(g.opts.Seed, t.name)
	var written chan error // the previous batch's write, nil before the first
	for b, first := 0, int64(0); first < nChunks; b, first = b+1, first+int64(g.workers) {
		batch := min(int64(g.workers), nChunks-first)
		bufs := g.bufs[b%2]
		var wg sync.WaitGroup
		for i := range batch {
			wg.Go(func() {
				c := first + i
				g.fill(bufs[i], g.vals[i], tensorSeed, uint64(c), int(min(chunkElems, total-c*chunkElems)), t.ones, t.scale)
			})
		}
		wg.Wait()
		if written != nil {
			if err := <-written; err != nil {
				return err
			}
		}
		written = make(chan error, 1)
		go func() {
			for i := range batch {
				c := first + i
				if _, err := w.Write(bufs[i][:min(chunkElems, total-c*chunkElems)*es]); err != nil {
					written <- err
					return
				}
			}
			written <- nil
		}()
	}
	if written != nil {
		return <-written
	}
	return nil
}

// writeBytes writes U8 tensor t: random bytes from its own PRNG stream, or t.fill throughout.
func (g *generator) writeBytes(w io.Writer, t tensorSpec) error {
	r := rand.New(rand.NewPCG(nameSeed(g.opts.Seed, t.name), 0))
	buf := g.bufs[0][0]
	for left := t.elems(); left > 0; {
		n := min(left, int64(len(buf)))
		for i := range buf[:n] {
			if t.fill != 0 {
				buf[i] = t.fill
			} else if i%8 == 0 {
				binary.LittleEndian.PutUint64(buf[i:i+8], r.Uint64()) // len(buf) is a multiple of 8
			}
		}
		if _, err := w.Write(buf[:n]); err != nil {
			return err
		}
		left -= n
	}
	return nil
}

// fill generates n values of chunk c of a tensor into out, using vals as scratch; scale multiplies them.
func (g *generator) fill(out []byte, vals []float32, tensorSeed, c uint64, n int, ones bool, scale float64) {
	vals = vals[:n]
	if ones {
		for i := range vals {
			vals[i] = float32(scale)
		}
	} else {
		r := rand.New(rand.NewPCG(tensorSeed, c))
		std := g.opts.Std * g.opts.Scale * scale
		for i := range vals {
			vals[i] = float32(r.NormFloat64() * std)
		}
	}
	if g.opts.DType == checkpoint.BF16 {
		checkpoint.F32ToBF16(out[:2*n], vals)
		return
	}
	for i, v := range vals {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
	}
}

func nameSeed(seed uint64, name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return h.Sum64() ^ (seed * 0x9e3779b97f4a7c15)
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ") // map keys come out sorted: reproducible files
	if err != nil {
		return fmt.Errorf("synth: %s: %w", path, err)
	}
	err = atomicfile.Write(path, func(w io.Writer) error {
		_, err := w.Write(append(b, '\n'))
		return err
	})
	if err != nil {
		return fmt.Errorf("synth: %s: %w", path, err)
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	return atomicfile.Write(dst, func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	})
}

// TotalBytes is the size of the weights Write would produce for opts (headers excluded).
func TotalBytes(opts Options) (int64, error) {
	if err := opts.fillDefaults(); err != nil {
		return 0, err
	}
	var n int64
	for _, t := range opts.tensors() {
		n += t.size(int64(opts.DType.Size()))
	}
	return n, nil
}
