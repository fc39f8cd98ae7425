package gguf

import (
	"slices"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/quant"
)

// phi3Opts varies the tiny phi3 file.
type phi3Opts struct {
	kvs      []KV     // metadata replacing the default's of the same key, or added
	drop     []string // tensors to leave out
	factors  int      // entries of each factor tensor (default 6: rope.dimension_count 12 / 2)
	separate bool     // separate attn_q/k/v instead of attn_qkv
}

// tinyPhi3 is a Phi-4-mini-shaped phi3 file as llama.cpp's converter writes one: hidden 64, 4 heads of 16
// (12 rotated), 2 key/value heads, longrope factors, attention factor, a sliding window.
func tinyPhi3(o phi3Opts) *testFile {
	const hidden, heads, kv, ff, vocab = 64, 4, 2, 128, 8
	f := &testFile{}
	f.kv("general.architecture", "phi3")
	f.kv("phi3.rope.scaling.attn_factor", float32(1.25))
	f.kv("phi3.context_length", uint32(192))
	f.kv("phi3.rope.scaling.original_context_length", uint32(48))
	f.kv("phi3.embedding_length", uint32(hidden))
	f.kv("phi3.feed_forward_length", uint32(ff))
	f.kv("phi3.block_count", uint32(1))
	f.kv("phi3.attention.head_count", uint32(heads))
	f.kv("phi3.attention.head_count_kv", uint32(kv))
	f.kv("phi3.attention.layer_norm_rms_epsilon", float32(1e-5))
	f.kv("phi3.rope.dimension_count", uint32(12))
	f.kv("phi3.rope.freq_base", float32(10000))
	f.kv("phi3.attention.sliding_window", uint32(2047))
	f.kv("tokenizer.ggml.model", "gpt2")
	f.kv("tokenizer.ggml.pre", "gpt-2")
	f.kv("tokenizer.ggml.tokens", []string{"a", "b", "ab", "d", "e", "f", "g", "h"})
	f.kv("tokenizer.ggml.merges", []string{"a b"})
	for _, e := range o.kvs { // replaces a key of the same name, else comes last
		if i := slices.IndexFunc(f.kvs, func(kv KV) bool { return kv.Key == e.Key }); i >= 0 {
			f.kvs[i] = e
		} else {
			f.kvs = append(f.kvs, e)
		}
	}
	n := o.factors
	if n == 0 {
		n = 6
	}
	long, short := make([]float32, n), make([]float32, n)
	for i := range n {
		long[i], short[i] = float32(i+1), 1+float32(i)/10
	}
	add := func(name string, rows, cols int) {
		if slices.Contains(o.drop, name) {
			return
		}
		if rows == 1 {
			f.tensor(name, quant.F32, f32Bytes(rowValues(1, cols)...), uint64(cols))
		} else {
			f.tensor(name, quant.F32, f32Bytes(rowValues(rows, cols)...), uint64(cols), uint64(rows))
		}
	}
	if !slices.Contains(o.drop, phi3LongFactors) {
		f.tensor(phi3LongFactors, quant.F32, f32Bytes(long...), uint64(n))
	}
	if !slices.Contains(o.drop, phi3ShortFactors) {
		f.tensor(phi3ShortFactors, quant.F32, f32Bytes(short...), uint64(n))
	}
	add("token_embd.weight", vocab, hidden)
	add("output_norm.weight", 1, hidden)
	add("blk.0.attn_norm.weight", 1, hidden)
	if o.separate {
		add("blk.0.attn_q.weight", hidden, hidden)
		add("blk.0.attn_k.weight", kv*16, hidden)
		add("blk.0.attn_v.weight", kv*16, hidden)
	} else {
		add("blk.0.attn_qkv.weight", hidden+2*kv*16, hidden)
	}
	add("blk.0.attn_output.weight", hidden, hidden)
	add("blk.0.ffn_norm.weight", 1, hidden)
	add("blk.0.ffn_up.weight", 2*ff, hidden)
	add("blk.0.ffn_down.weight", hidden, ff)
	return f
}

func openPhi3(t *testing.T, o phi3Opts) (*File, error) {
	t.Helper()
	return Open(writeTemp(t, tinyPhi3(o).bytes()))
}

// TestPhi3Checkpoint checks what a phi3 file becomes: fused projections under Phi3's names, the factor tensors
// read into rope_scaling (not weights), the rotated part of each head as partial_rotary_factor, and no sliding
// window (llama.cpp turns it off for phi3).
func TestPhi3Checkpoint(t *testing.T) {
	g, err := openPhi3(t, phi3Opts{})
	if err != nil {
		t.Fatal(err)
	}
	ck, err := g.Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	c := ck.Config
	r := c.Rope
	if c.Arch.Name != "Phi3ForCausalLM" || c.HeadDim != 16 || r.PartialRotaryFactor != 0.75 || r.Type != "longrope" ||
		r.OriginalMaxPositionEmbeddings != 48 || c.MaxPositionEmbeddings != 192 || r.AttentionFactor == nil ||
		*r.AttentionFactor != 1.25 || c.SlidingWindow != nil {
		t.Fatalf("config %+v, rope %+v", c, r)
	}
	if !slices.Equal(r.LongFactor, []float64{1, 2, 3, 4, 5, 6}) || len(r.ShortFactor) != 6 || float32(r.ShortFactor[5]) != 1.5 {
		t.Fatalf("long_factor %v, short_factor %v", r.LongFactor, r.ShortFactor)
	}
	var names []string
	for _, ti := range ck.Tensors {
		names = append(names, ti.Name)
	}
	for _, want := range []string{"model.layers.0.self_attn.qkv_proj.weight", "model.layers.0.mlp.gate_up_proj.weight"} {
		if !slices.Contains(names, want) {
			t.Errorf("no %s in %v", want, names)
		}
	}
	if len(names) != 8 {
		t.Errorf("%d tensors %v, want the 8 weights", len(names), names)
	}

	// Without factors: the default rope, and an attention factor of 1 changes nothing.
	g, err = openPhi3(t, phi3Opts{drop: []string{phi3LongFactors, phi3ShortFactors},
		kvs: []KV{{"phi3.rope.scaling.attn_factor", Value{Type: TypeFloat32, V: float32(1)}}}})
	if err == nil {
		ck, err = g.Checkpoint()
	}
	if err != nil || ck.Config.Rope.Type != "default" {
		t.Fatalf("without factors: %v %+v", err, ck.Config.Rope)
	}
}

// TestPhi3Refuses checks that phi3 files layerstream would compute differently from llama.cpp are refused by name.
func TestPhi3Refuses(t *testing.T) {
	kv := func(k string, v Value) []KV { return []KV{{k, v}} }
	cases := []struct {
		o    phi3Opts
		want string
	}{
		{phi3Opts{drop: []string{phi3ShortFactors}}, `tensor "rope_factors_long.weight" without "rope_factors_short.weight"`},
		{phi3Opts{drop: []string{phi3LongFactors}}, `tensor "rope_factors_short.weight" without "rope_factors_long.weight"`},
		{phi3Opts{drop: []string{phi3LongFactors, phi3ShortFactors}}, "phi3.rope.scaling.attn_factor is 1.25 without longrope factors"},
		{phi3Opts{factors: 8}, `tensor "rope_factors_long.weight" has shape [8], want [6]`},
		{phi3Opts{kvs: []KV{{"phi3.rope.scaling.type", Value{Type: TypeString, V: "linear"}},
			{"phi3.rope.scaling.factor", Value{Type: TypeFloat32, V: float32(2)}}}}, "linear scaling with longrope factors (rope_factors_long.weight) is not supported"},
		{phi3Opts{kvs: kv("phi3.rope.dimension_count", Value{Type: TypeUint32, V: uint32(11)})}, "partial rotary"},
		{phi3Opts{kvs: kv("phi3.rope.dimension_count", Value{Type: TypeUint32, V: uint32(32)})}, "partial rotary"},
		{phi3Opts{separate: true}, `tensor "blk.0.attn_q.weight" is not supported`},
		{phi3Opts{kvs: kv("phi3.rope.scaling.yarn_log_multiplier", Value{Type: TypeFloat32, V: float32(1)})}, "yarn_log_multiplier is not supported"},
	}
	for _, c := range cases {
		g, err := openPhi3(t, c.o)
		if err == nil {
			_, err = g.Checkpoint()
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want an error containing %q", err, c.want)
		}
	}
}
