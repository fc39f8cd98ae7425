package engine

import (
	"context"
	"math"
	"path/filepath"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/internal/testutil"
	"github.com/layerstream/layerstream/shards"
	"github.com/layerstream/layerstream/tokenizer"
)

// accuracyText is the fixed text the quantization accuracy is measured on (teacher-forced: every position
// predicts the next token of the text).
const accuracyText = `The history of the printing press begins in the middle of the fifteenth century, when Johannes
Gutenberg, a goldsmith from Mainz, combined several existing technologies into a system for producing books. Movable
type made of metal could be arranged into pages, inked, and pressed onto paper with a screw press adapted from those
used to make wine and olive oil. Before this, books in Europe were copied by hand, a slow and expensive process that
kept them out of reach for most people. Within fifty years, printing shops had spread to more than two hundred cities,
and millions of books had been produced. The effects were profound. Scholars could compare identical copies of a text,
errors were no longer multiplied by each new scribe, and ideas travelled faster than ever before. Pamphlets and
newspapers followed, and with them new ways of arguing about religion, science and politics. Historians still debate
how much the press caused the changes that followed, such as the Reformation and the scientific revolution, and how
much it simply made them easier, but few doubt that the world after Gutenberg was very different from the world
before him. Today, the same questions are asked about computers and the internet, which have once again changed how
information is made, copied and shared. In a small kitchen at the end of the street, a cat watched the rain.`

// accuracy is the result of teacher-forcing a text through a model.
type accuracy struct {
	argmax     []int
	perplexity float64
}

// teacherForced runs ids through the engine in one pass and returns each position's argmax and the text's
// perplexity (the next tokens' mean negative log-likelihood, exponentiated).
func teacherForced(t *testing.T, e *Engine, ids []int) accuracy {
	t.Helper()
	logits, err := e.Logits(context.Background(), ids)
	if err != nil {
		t.Fatal(err)
	}
	var a accuracy
	nll := 0.0
	for i, row := range logits[:len(ids)-1] {
		best, top := 0, float32(math.Inf(-1))
		maxv := float64(math.Inf(-1))
		for j, v := range row {
			if v > top {
				best, top = j, v
			}
			maxv = math.Max(maxv, float64(v))
		}
		sum := 0.0
		for _, v := range row {
			sum += math.Exp(float64(v) - maxv)
		}
		nll += -(float64(row[ids[i+1]]) - maxv - math.Log(sum))
		a.argmax = append(a.argmax, best)
	}
	a.perplexity = math.Exp(nll / float64(len(ids)-1))
	return a
}

// checkQuantizedAccuracy splits the checkpoint at dir as it is and quantized (q8, q4), teacher-forces
// accuracyText (its first maxTokens tokens) through each, and checks the quantized ones' argmax agreement with
// the unquantized one against the targets (q8 ≥ 99%, q4 ≥ 95%).
func checkQuantizedAccuracy(t *testing.T, dir string, maxTokens int) {
	ck, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := tok.Encode(accuracyText, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) > maxTokens {
		ids = ids[:maxTokens]
	}
	tmp := t.TempDir()
	results := map[shards.Quantization]accuracy{}
	sizes := map[shards.Quantization]int64{}
	for _, q := range []shards.Quantization{shards.None, shards.Q8, shards.Q4} {
		out := filepath.Join(tmp, "q"+string(q))
		set, err := shards.Split(context.Background(), ck, shards.SplitOptions{Out: out, Quantize: q})
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range set.Units() {
			if u.Layer >= 0 {
				sizes[q] += u.FileSize
			}
		}
		e, err := Open(context.Background(), out, Options{})
		if err != nil {
			t.Fatal(err)
		}
		results[q] = teacherForced(t, e, ids)
		e.Close()
	}
	base := results[shards.None]
	t.Logf("%s, %d teacher-forced positions: unquantized perplexity %.3f (layers %d bytes)", dir, len(base.argmax), base.perplexity, sizes[shards.None])
	for q, goal := range map[shards.Quantization]float64{shards.Q8: 0.99, shards.Q4: 0.95} {
		r := results[q]
		same := 0
		for i, a := range r.argmax {
			if a == base.argmax[i] {
				same++
			}
		}
		agree := float64(same) / float64(len(r.argmax))
		t.Logf("%s: argmax agreement %.4f (%d/%d), perplexity %.3f, layers %d bytes (%.3f of unquantized)", q, agree, same,
			len(r.argmax), r.perplexity, sizes[q], float64(sizes[q])/float64(sizes[shards.None]))
		if agree < goal {
			t.Errorf("%s: argmax agreement %.4f with the unquantized model, goal ≥ %.2f", q, agree, goal)
		}
	}
}

// TestQuantizedAccuracySmolLM2 measures q8 and q4 shards of the bf16 SmolLM2-135M-Instruct checkpoint
// (scripts/fixtures/smollm2_hf.py) against the bf16 shards over 300 teacher-forced positions. The checkpoint is
// the Q4_1 GGUF dequantized, so its weights sit on Q4_1's grid: q4's Q4_1 matrices (the 576-wide rows) re-encode
// them almost exactly, and the q4 agreement here is optimistic for those; TestQuantizedAccuracyStories measures
// a model trained in float32.
func TestQuantizedAccuracySmolLM2(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: three splits and three 300-position passes of a 135M model")
	}
	dir := testutil.ModelPath(t, filepath.Join("smollm2-135m-instruct-hf", "bf16"), "scripts/fixtures/smollm2_hf.py")
	checkQuantizedAccuracy(t, dir, 300)
}

// TestQuantizedAccuracyStories measures q8 and q4 on stories260K (trained in float32; ../shared/models).
func TestQuantizedAccuracyStories(t *testing.T) {
	checkQuantizedAccuracy(t, testutil.SharedPath(t, "models", "stories260K-hf"), 300)
}
