package model

import (
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
)

// TestGemmaEmbedScale: √hidden_size as torch rounds it to the model's dtype (torch.tensor(h**0.5).to(dtype),
// read from torch 2.15), for the hidden sizes of released Gemma 2 and 3 models.
func TestGemmaEmbedScale(t *testing.T) {
	for _, c := range []struct {
		hidden         int
		f32, bf16, f16 float64
	}{
		{3072, 55.42562484741211, 55.5, 55.4375},
		{2304, 48, 48, 48},
		{1152, 33.941123962402344, 34, 33.9375},
		{2560, 50.59644317626953, 50.5, 50.59375},
		{3584, 59.866519927978516, 59.75, 59.875},
		{5376, 73.32121276855469, 73.5, 73.3125},
	} {
		for dtype, want := range map[string]float64{"float32": c.f32, "bfloat16": c.bf16, "float16": c.f16} {
			got, err := gemmaEmbedScale(&checkpoint.Config{HiddenSize: c.hidden, TorchDType: dtype})
			if err != nil || got != want {
				t.Errorf("hidden %d, %s: %v %v, want %v", c.hidden, dtype, got, err, want)
			}
		}
	}
	if _, err := gemmaEmbedScale(&checkpoint.Config{HiddenSize: 64}); err == nil {
		t.Error("no dtype: accepted")
	}
}
