package engine

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/internal/testutil"
)

// TestKVCacheF16: with Options.KVCache f16 the host kernels keep keys and values in float16. The logits of
// stories260K stay within kvHalfTol of the float32 cache's (and differ: the option is not ignored), a prompt
// prefilled in one pass gives what it gives a token at a time, and greedy generation gives the same tokens. The
// graph paths refuse it by name.
func TestKVCacheF16(t *testing.T) {
	model := testutil.SharedPath(t, "models", "stories260K-hf")
	ids := testIDs
	f32 := open(t, model, Options{})
	f16 := open(t, model, Options{KVCache: KVCacheF16})
	want, got := tokenByToken(t, f32, ids), tokenByToken(t, f16, ids)
	if !f16.run.kv.Config().Half || f32.run.kv.Config().Half {
		t.Fatalf("caches: f16 engine Half=%v, f32 engine Half=%v", f16.run.kv.Config().Half, f32.run.kv.Config().Half)
	}
	const kvHalfTol = 0.02
	d := maxDiff(want, got)
	t.Logf("largest logit difference, float16 against float32 cache: %.2g over %d positions (tolerance %g)", d, len(ids), kvHalfTol)
	if d > kvHalfTol || d == 0 {
		t.Errorf("float16 cache logits differ from float32's by %g, want (0, %g]", d, kvHalfTol)
	}
	if d := maxDiff(got[9:], prefillDecode(t, f16, ids, 10)[9:]); d > 1e-5 {
		t.Errorf("float16 cache: a prompt prefilled in one pass differs from token by token by %g", d)
	}
	req := Request{PromptIDs: ids[:5], MaxNewTokens: 24}
	a, err := f32.Generate(context.Background(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := f16.Generate(context.Background(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.GeneratedIDs, b.GeneratedIDs) {
		t.Errorf("greedy tokens with a float16 cache %v, float32 %v", b.GeneratedIDs, a.GeneratedIDs)
	}
	for _, o := range []Options{{KVCache: KVCacheF16, GraphDecode: true}, {KVCache: "f8"}} {
		if err := o.Check(); err == nil || !strings.Contains(err.Error(), "--kv-cache") {
			t.Errorf("%+v: %v, want a refusal naming --kv-cache", o, err)
		}
	}
}
