package checkpoint

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// TestDeepSeekConfig: DeepseekV3Config's defaults (q_lora_rank 1536 when absent, nil when null; DeepSeek's own
// router keys at transformers' values), the multi-token-prediction layers left unread (one by default), and a key
// of a later DeepSeek (V3.2's index_topk) refused by name.
func TestDeepSeekConfig(t *testing.T) {
	ds := func(edit map[string]any) []byte {
		e := map[string]any{"architectures": []string{"DeepseekV3ForCausalLM"}, "model_type": "deepseek_v3", "mlp_bias": nil,
			"n_routed_experts": 8, "kv_lora_rank": 32}
		for k, v := range edit {
			e[k] = v
		}
		return llamaConfig(t, e)
	}
	c, err := ParseConfig(ds(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.QLoraRank == nil || *c.QLoraRank != 1536 || c.QKRopeHeadDim != 64 || c.NGroup != 8 || c.TopKGroup != 4 ||
		c.FirstKDenseReplace != 3 || c.ScoringFunc != "sigmoid" || c.TopKMethod != "noaux_tc" || c.MoELayerFreq != 1 ||
		!c.RopeInterleave || c.RoutedScalingFactor != 2.5 || c.NumExperts != 8 {
		t.Errorf("defaults: %+v", c.LatentAttention)
	}
	if got := c.UnreadLayers(); !slices.Equal(got, []string{"model.layers.2."}) {
		t.Errorf("unread layers %v, want the one multi-token-prediction layer after the 2 of the decoder", got)
	}
	if c, err = ParseConfig(ds(map[string]any{"q_lora_rank": json.RawMessage("null"), "num_nextn_predict_layers": 0})); err != nil || c.QLoraRank != nil || c.UnreadLayers() != nil {
		t.Errorf("q_lora_rank null: %v, %v, unread %v", err, c.QLoraRank, c.UnreadLayers())
	}
	if _, err := ParseConfig(ds(map[string]any{"index_topk": 2048})); err == nil || !strings.Contains(err.Error(), "does not implement key index_topk") {
		t.Errorf("index_topk: got %v, want it refused by name", err)
	}
}
