package gguf

import (
	"fmt"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
)

// TestGptOssMapping: llama.cpp's gpt-oss files (F32 experts, and MXFP4 experts repacked by its converter) read as
// GptOssForCausalLM: each expert's gate and up (ffn_gate_exps, ffn_up_exps, weights and biases) as one gate_up
// tensor whose first part is the gate's slice and second the up's, down_proj and its bias as views, the router,
// its bias and the sinks by name; the config says what llama.cpp fixes (yarn rounded: no truncate key, the
// experts' width expert_feed_forward_length, the sliding window).
func TestGptOssMapping(t *testing.T) {
	for _, c := range []struct {
		file  string
		inter int
		dtype checkpoint.DType
	}{{"gpt_oss", 48, checkpoint.F32}, {"gpt_oss-mxfp4", 64, checkpoint.MXFP4}} {
		t.Run(c.file, func(t *testing.T) {
			g := openMoE(t, c.file)
			ck, err := g.Checkpoint()
			if err != nil {
				t.Fatal(err)
			}
			cfg := ck.Config
			if cfg.Architectures[0] != "GptOssForCausalLM" || cfg.NumExperts != 4 || cfg.NumExpertsPerTok != 2 || cfg.IntermediateSize != c.inter ||
				cfg.SlidingWindow == nil || *cfg.SlidingWindow != 8 || cfg.Rope.Type != "yarn" || cfg.Rope.Truncate != nil || !cfg.AttentionBias {
				t.Errorf("config %+v", cfg)
			}
			for _, name := range []string{"model.layers.1.self_attn.sinks", "model.layers.1.mlp.router.weight", "model.layers.1.mlp.router.bias"} {
				if _, ok := ck.Tensor(name); !ok {
					t.Errorf("no %s", name)
				}
			}
			for _, p := range []struct{ gate, up, hf string }{
				{"ffn_gate_exps.weight", "ffn_up_exps.weight", "gate_up_proj.weight"},
				{"ffn_gate_exps.bias", "ffn_up_exps.bias", "gate_up_proj.bias"},
				{"ffn_down_exps.weight", "", "down_proj.weight"},
			} {
				gate, _ := g.Tensor("blk.1." + p.gate)
				up, _ := g.Tensor("blk.1." + p.up)
				per := gate.Size / 4
				for e := range 4 {
					ti, ok := ck.Tensor(fmt.Sprintf("model.layers.1.mlp.experts.%d.%s", e, p.hf))
					want := checkpoint.Range{}
					if p.up != "" {
						want = checkpoint.Range{Offset: up.Offset + int64(e)*per, Length: per}
					}
					if !ok || ti.Offset != gate.Offset+int64(e)*per || ti.Length != per+want.Length || ti.Second != want {
						t.Errorf("expert %d %s: %+v; want bytes %d+%d of %s then %+v", e, p.hf, ti, gate.Offset+int64(e)*per, per, gate.Name, want)
					}
					if p.hf != "gate_up_proj.bias" && ti.DType != c.dtype {
						t.Errorf("expert %d %s is %s, want %s", e, p.hf, ti.DType, c.dtype)
					}
				}
			}
		})
	}
}
