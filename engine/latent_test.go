package engine

import (
	"context"
	"slices"
	"testing"
	"unsafe"

	"github.com/layerstream/layerstream/internal/hffixture"
	"github.com/layerstream/layerstream/kvcache"
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
	want := make([][]float32, len(ids))
	for p := range want {
		want[p] = ref.Row(p)
	}
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
