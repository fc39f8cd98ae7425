package gguf

import (
	"fmt"
	"math"
)

// Granite (3.x): the Llama tensors, q/k rows permuted as Llama's (the converter's GraniteModel is a LlamaModel;
// llama.cpp ropes them NORM-style), with the four multipliers the converter renames: attention_multiplier →
// attention.scale, embedding_multiplier → embedding_scale, residual_multiplier → residual_scale, logits_scaling →
// logit_scale (the logits are divided by it). Like llama's, llama.cpp's granite adds every bias the file has
// and applies rope_freqs.weight (Llama 3.1-style rope scaling), so both are read as for llama.
func init() {
	register("granite", archInfo{hf: "GraniteForCausalLM", interleavedRotary: true, configTensors: []string{"rope_freqs.weight"},
		keys: []string{"attention.scale", "embedding_scale", "residual_scale", "logit_scale"}, config: graniteConfig})
}

// graniteConfig reads the multipliers as llama.cpp's granite does (llama_model_granite::load_arch_hparams and
// its graph): logit_scale is required and divides the logits; an absent or zero embedding_scale or
// residual_scale scales nothing; an absent or zero attention.scale leaves the attention scale at 1/√head_dim
// (not transformers' default attention_multiplier 1.0). rope.scaling.finetuned, which llama.cpp's granite
// reads as the switch for rotary embeddings (default on), must not turn them off.
func graniteConfig(m archMeta, cfg map[string]any) error {
	ls, ok, err := m.Float(m.key("logit_scale"))
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("metadata %s is missing (llama.cpp requires it)", m.key("logit_scale"))
	}
	if ls == 0 { // Float refuses NaN and infinities
		return fmt.Errorf("metadata %s is %g: the logits are divided by it", m.key("logit_scale"), ls)
	}
	cfg["logits_scaling"] = float32JSON(ls)
	for k, hf := range map[string]string{"embedding_scale": "embedding_multiplier", "residual_scale": "residual_multiplier"} {
		v, ok, err := m.Float(m.key(k))
		if err != nil {
			return err
		}
		if !ok || v == 0 {
			v = 1
		}
		cfg[hf] = float32JSON(v)
	}
	as, ok, err := m.Float(m.key("attention.scale"))
	if err != nil {
		return err
	}
	if !ok || as == 0 {
		as = 1 / math.Sqrt(float64(cfg["head_dim"].(int)))
	}
	cfg["attention_multiplier"] = float32JSON(as)
	if v, ok, err := m.Bool(m.key("rope.scaling.finetuned")); err != nil {
		return err
	} else if ok && !v {
		return fmt.Errorf("metadata %s is false: llama.cpp's granite then runs without rotary embeddings, which is not supported", m.key("rope.scaling.finetuned"))
	}
	biasesFromTensors(m, cfg)
	return ropeFreqs(m, cfg)
}
