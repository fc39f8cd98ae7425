package reference

import "testing"

// TestGemmaNormalizer: √hidden_size rounded to the model's dtype as torch rounds it (read from torch 2.15).
func TestGemmaNormalizer(t *testing.T) {
	for _, c := range []struct {
		hidden int
		dtype  string
		want   float64
	}{
		{3072, "float32", 55.42562484741211}, {3072, "bfloat16", 55.5}, {3072, "float16", 55.4375},
		{1152, "bfloat16", 34}, {1152, "float16", 33.9375}, {3584, "bfloat16", 59.75}, {5376, "float16", 73.3125},
	} {
		if got, err := gemmaNormalizer(c.hidden, c.dtype); err != nil || got != c.want {
			t.Errorf("hidden %d, %s: %v %v, want %v", c.hidden, c.dtype, got, err, c.want)
		}
	}
}
