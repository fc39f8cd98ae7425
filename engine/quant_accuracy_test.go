package engine

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/engine/kernels"
	"github.com/layerstream/layerstream/imatrix"
	"github.com/layerstream/layerstream/internal/hffixture"
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

// teacherForced runs ids through the engine in one pass and returns each position's logits' argmax, the margin
// of its top logit over the second, the negative log-likelihood of each next token, and the logits themselves.
func teacherForced(t *testing.T, e *Engine, ids []int) (argmax []int, margins, nll []float64, rows [][]float32) {
	t.Helper()
	logits, err := e.Logits(context.Background(), ids)
	if err != nil {
		t.Fatal(err)
	}
	for i, row := range logits[:len(ids)-1] {
		best, second := 0, float32(math.Inf(-1))
		for j, v := range row {
			if v > row[best] {
				best, second = j, row[best]
			} else if j != best && v > second {
				second = v
			}
		}
		margins = append(margins, float64(row[best]-second))
		argmax = append(argmax, best)
		nll = append(nll, kernels.LogSumExp(row)-float64(row[ids[i+1]]))
	}
	return argmax, margins, nll, logits[:len(ids)-1]
}

// meanKL is the mean over positions of KL(p‖q), p and q given as logits rows: how far a quantized model's
// next-token distributions are from the unquantized one's. Unlike the argmax agreement, which counts the few
// near-ties a perturbation happens to flip, it weighs every position.
func meanKL(p, q [][]float32) float64 {
	sum := 0.0
	for i := range p {
		lp, lq := kernels.LogSumExp(p[i]), kernels.LogSumExp(q[i])
		for j, v := range p[i] {
			a := float64(v) - lp
			sum += math.Exp(a) * (a - (float64(q[i][j]) - lq))
		}
	}
	return sum / float64(len(p))
}

// accuracyRun is one split's results: argmax at the scored positions of the generated sequences, perplexity
// of accuracyText, and the layers' bytes on disk.
type accuracyRun struct {
	argmax     []int
	margins    []float64
	logits     [][]float32 // at the scored positions
	perplexity float64
	bytes      int64
}

// agree counts the positions where a and b (equally long) hold the same id, and their share.
func agree(a, b []int) (int, float64) {
	n := 0
	for i := range a {
		if a[i] == b[i] {
			n++
		}
	}
	return n, float64(n) / float64(len(a))
}

// quantVariant is one way of quantizing the checkpoint that checkQuantizedAccuracy measures: the unquantized
// split (q None), q8, q4, and q8 and q4 with an importance matrix collected on a calibration text.
type quantVariant struct {
	name    string
	q       shards.Quantization
	imatrix bool
}

// collectImatrix runs the split in dir over calibration (pieces of 512 tokens, at most 8) with the inputs of the
// products observed, and returns the importance matrix.
func collectImatrix(t *testing.T, dir string, tok *tokenizer.Tokenizer, calibration string) *imatrix.Matrix {
	t.Helper()
	ids, err := tok.Encode(calibration, false)
	if err != nil {
		t.Fatal(err)
	}
	c := imatrix.NewCollector()
	e, err := Open(context.Background(), dir, Options{ObserveInputs: c.Observe})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for i := 0; i < len(ids) && i < 8*512; i += 512 {
		if _, err := e.Logits(context.Background(), ids[i:min(i+512, len(ids))]); err != nil {
			t.Fatal(err)
		}
	}
	return c.Matrix()
}

// checkQuantizedAccuracy splits the checkpoint at dir as it is and quantized (q8, q4, and with a calibration
// text q8 with an importance matrix collected on it) and compares the quantized models' argmax with the
// unquantized one's over positions of text the model generates: seqs are prompts with greedy continuations, and
// the positions predicting the continuations count, up to maxPositions. That is the regime generation runs in:
// where the argmax is what greedy decoding picks. Perplexity is measured on accuracyText (natural text, where a
// small model has many near-ties; the argmax agreement there is logged). goals are the least agreements, by
// variant name (q8, q4, q8+imatrix). It returns the unquantized model's argmax at the scored positions and each
// variant's mean KL divergence from the unquantized model there (meanKL).
func checkQuantizedAccuracy(t *testing.T, dir string, seqs [][2][]int, maxPositions int, goals map[string]float64, calibration string) ([]int, map[string]float64) {
	ck, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	text, err := tok.Encode(accuracyText, true)
	if err != nil {
		t.Fatal(err)
	}
	text = text[:min(len(text), ck.Config.MaxPositionEmbeddings)]
	tmp := t.TempDir()
	variants := []quantVariant{{"unquantized", shards.None, false}, {"q8", shards.Q8, false}, {"q4", shards.Q4, false}}
	if calibration != "" {
		variants = append(variants, quantVariant{"q8+imatrix", shards.Q8, true}, quantVariant{"q4+imatrix", shards.Q4, true})
	}
	runs := map[string]*accuracyRun{}
	textArgmax := map[string][]int{}
	var imp *imatrix.Matrix
	for _, v := range variants {
		out := filepath.Join(tmp, v.name)
		opts := shards.SplitOptions{Out: out, Quantize: v.q}
		if v.imatrix {
			if imp == nil {
				imp = collectImatrix(t, filepath.Join(tmp, "unquantized"), tok, calibration)
			}
			opts.Importance = imp
		}
		set, err := shards.Split(context.Background(), ck, opts)
		if err != nil {
			t.Fatal(err)
		}
		r := &accuracyRun{}
		for _, u := range set.Units() {
			if u.Layer >= 0 {
				r.bytes += u.FileSize
			}
		}
		e, err := Open(context.Background(), out, Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range seqs {
			am, mg, _, rows := teacherForced(t, e, append(slices.Clone(s[0]), s[1]...))
			r.argmax = append(r.argmax, am[len(s[0])-1:]...)
			r.margins = append(r.margins, mg[len(s[0])-1:]...)
			r.logits = append(r.logits, rows[len(s[0])-1:]...)
		}
		r.argmax = r.argmax[:min(maxPositions, len(r.argmax))]
		r.logits = r.logits[:len(r.argmax)]
		am, _, nll, _ := teacherForced(t, e, text)
		textArgmax[v.name] = am
		sum := 0.0
		for _, v := range nll {
			sum += v
		}
		r.perplexity = math.Exp(sum / float64(len(nll)))
		e.Close()
		runs[v.name] = r
	}
	for _, name := range []string{"q8+imatrix", "q4+imatrix"} {
		if imp == nil {
			break
		}
		// The split keeps the matrix it was quantized with, and verify quantizes the checkpoint again with it.
		set, err := shards.Open(filepath.Join(tmp, name))
		if err != nil {
			t.Fatal(err)
		}
		if rep, err := set.Verify(context.Background(), ck); err != nil || !rep.OK() {
			t.Errorf("verify of the %s split: %v %v", name, err, rep.Problems)
		}
	}
	base := runs["unquantized"]
	kl := map[string]float64{}
	t.Logf("%s: unquantized perplexity %.3f on a %d-token text; layers %d bytes", dir, base.perplexity, len(text), base.bytes)
	for _, v := range variants[1:] {
		r := runs[v.name]
		n, a := agree(r.argmax, base.argmax)
		tn, ta := agree(textArgmax[v.name], textArgmax["unquantized"])
		goal := goals[v.name]
		kl[v.name] = meanKL(base.logits, r.logits)
		t.Logf("%s: argmax agreement %.4f (%d/%d generated positions; on the text %.4f, %d/%d), mean KL divergence %.3g, perplexity %.3f (%+.2f%%), layers %d bytes (%.3f of unquantized)",
			v.name, a, n, len(r.argmax), ta, tn, len(textArgmax[v.name]), kl[v.name], r.perplexity, 100*(r.perplexity/base.perplexity-1), r.bytes, float64(r.bytes)/float64(base.bytes))
		var near []string
		for i, id := range r.argmax {
			if id != base.argmax[i] {
				near = append(near, fmt.Sprintf("%.3f", base.margins[i]))
			}
		}
		t.Logf("%s: the unquantized model's top-1 margins where the argmax differs: %s", v.name, strings.Join(near, " "))
		if a < goal {
			t.Errorf("%s: argmax agreement %.4f with the unquantized model, goal ≥ %.2f", v.name, a, goal)
		}
	}
	return base.argmax, kl
}

// TestQuantizedAccuracySmolLM2 measures q8 and q4 shards of the bf16 SmolLM2-135M-Instruct checkpoint
// (scripts/fixtures/smollm2_hf.py) against the bf16 shards over 300 positions of the model's own greedy text (the
// 8 prompts and continuations of the llama.cpp fixture). The checkpoint is the Q4_1 GGUF dequantized, so its
// weights sit on Q4_1's grid: q4's Q4_1 matrices (the 576-wide rows) re-encode them almost exactly, which makes q4
// look better here than on a model trained in float; TestQuantizedAccuracyStories measures one.
func TestQuantizedAccuracySmolLM2(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: three splits and passes of a 135M model")
	}
	dir := hffixture.SmolLM2Checkpoint(t, "bf16")
	var ref struct {
		Cases []llamaCppCase `json:"cases"`
	}
	readJSON(t, "../gguf/testdata/llamacpp/smollm2-q4_1.json", &ref)
	var seqs [][2][]int
	for _, c := range ref.Cases {
		seqs = append(seqs, [2][]int{c.PromptIDs, c.IDs})
	}
	// The goals are the issue's: 0.99 and 0.95. q8 measures 0.997 (299/300; 279/280 on the natural text), with a
	// mean KL divergence from the unquantized model of 5.7e-4, a sixth of llama.cpp's own Q8_0's (3.7e-3: the
	// yardstick below, scripts/fixtures/llamacpp_q8_agreement.py, the same checkpoint converted by llama.cpp to
	// BF16 and Q8_0, the same positions; it agrees at 297/300 with its own BF16). Two changes got it there from
	// 293/300 and 3.4e-3: the scale search of quant.QuantizeQ8_0Search (weights) and two-part inputs
	// (kernels.QuantMatrix.TwoPart: Q8_0 products no longer round the activations to 8 bits, which cost two thirds
	// of the divergence). The agreement count is coarse at this level: 15 of these positions have the top two
	// logits within 0.09, and equally good quantizers score a few positions apart (docs/performance-log.md); the KL
	// bound, at twice what is measured, is the finer guard.
	// The calibration text of the importance matrix, unrelated to the scored positions: the README as it was at
	// e5a0c7d (57 KB), frozen so that the figures below do not move when the README is edited.
	readme, err := os.ReadFile(calibrationText)
	if err != nil {
		t.Fatal(err)
	}
	base, kl := checkQuantizedAccuracy(t, dir, seqs, 300, map[string]float64{"q8": 0.99, "q4": 0.95, "q8+imatrix": 0.99, "q4+imatrix": 0.95}, string(readme))
	var yard struct {
		Agree      int     `json:"agree"`
		Positions  int     `json:"positions"`
		KL         float64 `json:"q8_0_mean_kl"`
		BF16Argmax []int   `json:"bf16_argmax"`
		Q8Argmax   []int   `json:"q8_0_argmax"`
	}
	readJSON(t, "../gguf/testdata/llamacpp/smollm2-q8-agreement.json", &yard)
	if len(yard.Q8Argmax) != len(base) || len(yard.BF16Argmax) != len(base) || yard.KL <= 0 {
		t.Fatalf("smollm2-q8-agreement.json scores %d and %d positions (KL %g), this test %d", len(yard.BF16Argmax), len(yard.Q8Argmax), yard.KL, len(base))
	}
	ours, _ := agree(yard.Q8Argmax, base)
	bf16, _ := agree(yard.BF16Argmax, base)
	t.Logf("llama.cpp's Q8_0 (the yardstick): %d/%d against llama.cpp's BF16 (mean KL divergence %.3g), %d/%d against this bf16; llama.cpp's BF16 against this bf16 %d/%d",
		yard.Agree, yard.Positions, yard.KL, ours, len(base), bf16, len(base))
	if kl["q8"] > 0.3*yard.KL {
		t.Errorf("q8: mean KL divergence %.3g from the unquantized model, more than 0.3 × llama.cpp's Q8_0's %.3g", kl["q8"], yard.KL)
	}
	// With the importance matrix (calibrationText, the README of e5a0c7d): q8 3.9e-4, 0.68
	// of q8's; q4 6.5e-3, 0.70 of q4's (295/300, perplexity +0.02% against +1.15%).
	if kl["q8+imatrix"] > 0.85*kl["q8"] || kl["q4+imatrix"] > 0.85*kl["q4"] {
		t.Errorf("importance matrix: mean KL divergence q8 %.3g (without %.3g), q4 %.3g (without %.3g): want at most 0.85 of each",
			kl["q8+imatrix"], kl["q8"], kl["q4+imatrix"], kl["q4"])
	}
}

// calibrationText is the importance matrices' calibration text in these tests: the project's README.md as it was at
// e5a0c7d, before the README was shortened (the measured figures in the comments were taken with that text).
const calibrationText = "../testdata/calibration/readme-e5a0c7d.md"

// TestQuantizedAccuracyStories measures q8 and q4 on stories260K (trained in float32; ../shared/models), over
// its own greedy stories. The goals are the for q8 and lower for q4 (90%): a 64-wide model has two
// 32-element blocks per row, its q4 matrices are all the Q4_1 fallback, and its down projection (172 wide) is
// not quantized at all.
func TestQuantizedAccuracyStories(t *testing.T) {
	dir := testutil.SharedPath(t, "models", "stories260K-hf")
	e, err := Open(context.Background(), dir, Options{ShardDir: filepath.Join(t.TempDir(), "s")})
	if err != nil {
		t.Fatal(err)
	}
	var seqs [][2][]int
	for _, prompt := range [][]int{{1, 403}, {1, 403, 407}, {1, 378}, {1, 320}, {1, 449}} {
		var gen []int
		req := Request{PromptIDs: prompt, MaxNewTokens: 60, StopIDs: []int{-1}}
		if _, err := e.Generate(context.Background(), req, func(tk Token) error { gen = append(gen, tk.ID); return nil }); err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, [2][]int{prompt, gen})
	}
	e.Close()
	readme, err := os.ReadFile(calibrationText) // as for SmolLM2: it also beat a story written for it and the model's own sampled stories
	if err != nil {
		t.Fatal(err)
	}
	_, kl := checkQuantizedAccuracy(t, dir, seqs, 300, map[string]float64{"q8": 0.99, "q4": 0.90, "q8+imatrix": 0.99, "q4+imatrix": 0.90}, string(readme))
	// Bounds at twice what is measured (q8 1.5e-4, 3.4e-4 before the scale search and two-part inputs; q4 4.2e-2):
	// a broken block format moves the distributions by orders of magnitude more.
	if kl["q8"] > 3e-4 || kl["q4"] > 0.085 {
		t.Errorf("mean KL divergence from the unquantized model: q8 %.3g (bound 3e-4), q4 %.3g (bound 0.085)", kl["q8"], kl["q4"])
	}
	// An importance matrix (calibrationText, a text unlike the stories) measures 0.81 of q8's divergence and 0.72 of
	// q4's (0.030 against 0.042; its perplexity 39.2 against q4's 42.3 and the unquantized 40.5).
	if kl["q8+imatrix"] > 0.95*kl["q8"] || kl["q4+imatrix"] > 0.85*kl["q4"] {
		t.Errorf("importance matrix: mean KL divergence q8 %.3g (without %.3g, bound 0.95×), q4 %.3g (without %.3g, bound 0.85×)",
			kl["q8+imatrix"], kl["q8"], kl["q4+imatrix"], kl["q4"])
	}
}
