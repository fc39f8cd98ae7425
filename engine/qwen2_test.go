package engine

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/reference"
)

// writeSafetensors writes float32 tensors as a safetensors file.
func writeSafetensors(t *testing.T, path string, tensors map[string][]float32, shapes map[string][]int) {
	t.Helper()
	names := make([]string, 0, len(tensors))
	for n := range tensors {
		names = append(names, n)
	}
	slices.Sort(names)
	header := map[string]any{}
	off := 0
	for _, n := range names {
		size := 4 * len(tensors[n])
		header[n] = map[string]any{"dtype": "F32", "shape": shapes[n], "data_offsets": []int{off, off + size}}
		off += size
	}
	h, err := json.Marshal(header)
	if err != nil {
		t.Fatal(err)
	}
	buf := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
	buf = append(buf, h...)
	for _, n := range names {
		for _, v := range tensors[n] {
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
		}
	}
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeQwen2 writes a random tiny Qwen2 checkpoint (q/k/v biases, untied head, head_dim ≠ hidden/heads).
func writeQwen2(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	const hidden, inter, layers, heads, kvHeads, headDim, vocab = 24, 40, 3, 4, 2, 8, 50
	cfg := map[string]any{
		"architectures": []string{"Qwen2ForCausalLM"}, "model_type": "qwen2", "hidden_size": hidden,
		"intermediate_size": inter, "num_hidden_layers": layers, "num_attention_heads": heads,
		"num_key_value_heads": kvHeads, "head_dim": headDim, "vocab_size": vocab, "max_position_embeddings": 64,
		"rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "hidden_act": "silu", "tie_word_embeddings": false,
		"torch_dtype": "float32", "eos_token_id": 3,
	}
	b, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	ts, sh := map[string][]float32{}, map[string][]int{}
	add := func(name string, norm bool, dims ...int) {
		n := 1
		for _, d := range dims {
			n *= d
		}
		v := make([]float32, n)
		for i := range v {
			if norm {
				v[i] = 1 + 0.1*float32(rng.NormFloat64())
			} else {
				v[i] = 0.3 * float32(rng.NormFloat64())
			}
		}
		ts[name], sh[name] = v, dims
	}
	add("model.embed_tokens.weight", false, vocab, hidden)
	add("model.norm.weight", true, hidden)
	add("lm_head.weight", false, vocab, hidden)
	for l := range layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		add(p+"input_layernorm.weight", true, hidden)
		add(p+"post_attention_layernorm.weight", true, hidden)
		add(p+"self_attn.q_proj.weight", false, heads*headDim, hidden)
		add(p+"self_attn.q_proj.bias", false, heads*headDim)
		add(p+"self_attn.k_proj.weight", false, kvHeads*headDim, hidden)
		add(p+"self_attn.k_proj.bias", false, kvHeads*headDim)
		add(p+"self_attn.v_proj.weight", false, kvHeads*headDim, hidden)
		add(p+"self_attn.v_proj.bias", false, kvHeads*headDim)
		add(p+"self_attn.o_proj.weight", false, hidden, heads*headDim)
		add(p+"mlp.gate_proj.weight", false, inter, hidden)
		add(p+"mlp.up_proj.weight", false, inter, hidden)
		add(p+"mlp.down_proj.weight", false, hidden, inter)
	}
	writeSafetensors(t, filepath.Join(dir, "model.safetensors"), ts, sh)
	return dir
}

// TestQwen2MatchesReference checks the biased-attention variant against the float64 reference forward pass
// (written independently from the math), streamed and token by token.
func TestQwen2MatchesReference(t *testing.T) {
	dir := writeQwen2(t)
	ck, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	ids := []int{1, 17, 4, 33, 49, 0, 12}
	ref, err := reference.Forward(ck, ids)
	if err != nil {
		t.Fatal(err)
	}
	e := open(t, dir, Options{})
	got, err := e.Logits(context.Background(), ids)
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, got [][]float32) {
		m := 0.0
		for p := range ref.Logits {
			for v := range ref.Logits[p] {
				m = max(m, math.Abs(float64(got[p][v])-ref.Logits[p][v]))
			}
		}
		t.Logf("%s vs float64 reference: max abs diff %.2g", what, m)
		if m > 1e-4 {
			t.Errorf("%s differs from the float64 reference by %g (> 1e-4)", what, m)
		}
	}
	check("one pass", got)
	check("token by token (host kernels)", tokenByToken(t, e, ids))
	check("token by token (graphs)", tokenByToken(t, open(t, dir, Options{GraphDecode: true}), ids))
}
