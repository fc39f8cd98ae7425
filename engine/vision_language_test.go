package engine

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/internal/hffixture"
	"github.com/layerstream/layerstream/shards"
)

// The vision-language wrapper fixtures (testdata/hf: Gemma3ForConditionalGeneration, Mistral3ForConditionalGeneration,
// made by transformers with a tiny random vision tower); TestHFFixtures runs them as transformers saved them.
var visionLanguageFixtures = []string{"gemma3-vl", "mistral3-vl"}

// modulesLayout renames a tensor from the layout transformers saves (language_model.model.*,
// language_model.lm_head.*, vision_tower.*, multi_modal_projector.*) to the one its modules use, which checkpoints
// saved from a loaded model's state_dict carry (model.language_model.*, lm_head.*, model.vision_tower.*,
// model.multi_modal_projector.*).
func modulesLayout(name string) string {
	for _, r := range [][2]string{{"language_model.model.", "model.language_model."}, {"language_model.lm_head.", "lm_head."},
		{"vision_tower.", "model.vision_tower."}, {"multi_modal_projector.", "model.multi_modal_projector."}} {
		if rest, ok := strings.CutPrefix(name, r[0]); ok {
			return r[1] + rest
		}
	}
	return name
}

// safetensors opens a safetensors file (closed when the test ends) and reads its header: every tensor, whatever
// an Architecture makes of its name.
func safetensors(t *testing.T, path string) (*os.File, []checkpoint.TensorInfo) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	infos, err := checkpoint.ParseSafetensors(f, st.Size(), path)
	if err != nil {
		t.Fatal(err)
	}
	return f, infos
}

// relayout rewrites dir/model.safetensors (f32) with every tensor renamed by rename (dropped where it returns ""),
// and extra tensors added.
func relayout(t *testing.T, dir string, rename func(string) string, extra map[string][]int) {
	t.Helper()
	path := filepath.Join(dir, "model.safetensors")
	f, infos := safetensors(t, path)
	ts, sh := map[string][]float32{}, map[string][]int{}
	for _, ti := range infos {
		name := rename(ti.Name)
		if name == "" {
			continue
		}
		b := make([]byte, ti.Length)
		if _, err := f.ReadAt(b, ti.Offset); err != nil {
			t.Fatal(err)
		}
		v := make([]float32, len(b)/4)
		for i := range v {
			v[i] = math.Float32frombits(uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24)
		}
		ts[name], sh[name] = v, make([]int, len(ti.Shape))
		for i, d := range ti.Shape {
			sh[name][i] = int(d)
		}
	}
	for name, shape := range extra {
		n := 1
		for _, d := range shape {
			n *= d
		}
		ts[name], sh[name] = make([]float32, n), shape
	}
	writeSafetensors(t, path, ts, sh)
}

// editConfig applies edit to dir/config.json, decoded.
func editConfig(t *testing.T, dir string, edit func(cfg map[string]any)) {
	t.Helper()
	path := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	edit(cfg)
	if b, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestVisionLanguageLayouts: Gemma 3 4B/12B/27B and Mistral Small 3.1/3.2 checkpoints on the Hub come in two
// tensor layouts, as transformers saves them (TestHFFixtures) and as its modules name them; Mistral Small 3.1's
// config.json has no top-level tie_word_embeddings (transformers 5 then defaults it to true and, finding lm_head
// and the embedding both in the checkpoint, does not tie). Each fixture in each layout and config spelling
// computes transformers' logits (Engine.Logits, the float64 reference) and greedy tokens.
func TestVisionLanguageLayouts(t *testing.T) {
	ctx := context.Background()
	for _, name := range visionLanguageFixtures {
		ref := hffixture.MustReference(t, name)
		ids := ints(ref.InputIDs)
		want := ref.Rows()
		for _, spelling := range hffixture.Spellings {
			for _, variant := range []string{"modules layout", "no top-level tie_word_embeddings"} {
				if variant != "modules layout" && name != "mistral3-vl" {
					continue
				}
				t.Run(name+"/"+spelling+"/"+variant, func(t *testing.T) {
					dir := hffixture.Checkpoint(t, name, spelling)
					if variant == "modules layout" {
						relayout(t, dir, modulesLayout, nil)
					} else {
						editConfig(t, dir, func(cfg map[string]any) { delete(cfg, "tie_word_embeddings") })
					}
					e := open(t, dir, Options{})
					got, err := e.Logits(ctx, ids)
					if err != nil {
						t.Fatal(err)
					}
					if d := maxDiff(got, want); d > hfTolerance {
						t.Errorf("logits differ from transformers' by %g", d)
					}
					if d := maxDiff(referenceLogits(t, dir, ids), want); d > hfTolerance {
						t.Errorf("the float64 reference differs from transformers' by %g", d)
					}
					res, err := e.Generate(ctx, Request{PromptIDs: ids, MaxNewTokens: len(ref.GreedyIDs), StopIDs: []int{}}, nil)
					if err != nil {
						t.Fatal(err)
					}
					if !slices.Equal(res.GeneratedIDs, ints(ref.GreedyIDs)) {
						t.Errorf("greedy %v, transformers %v", res.GeneratedIDs, ref.GreedyIDs)
					}
				})
			}
		}
	}
}

// TestVisionLanguageSplit: the split of a vision-language checkpoint holds the decoder's tensors only, every one
// of them, under the decoder's names: the vision tower and projector are neither read nor copied.
func TestVisionLanguageSplit(t *testing.T) {
	for _, name := range visionLanguageFixtures {
		dir := hffixture.Checkpoint(t, name, hffixture.V5)
		_, all := safetensors(t, filepath.Join(dir, "model.safetensors"))
		decoder := map[string]int64{}
		for _, ti := range all {
			if rest, ok := strings.CutPrefix(ti.Name, "language_model."); ok {
				decoder[rest] = ti.Length
			}
		}
		if len(decoder) == 0 || len(decoder) == len(all) {
			t.Fatalf("%s: %d of %d tensors under language_model.", name, len(decoder), len(all))
		}
		ck, err := checkpoint.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		set, err := shards.Split(context.Background(), ck, shards.SplitOptions{Out: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		split := map[string]int64{}
		for _, u := range set.Units() {
			for _, ti := range u.Tensors {
				split[ti.Name] = ti.Length
			}
		}
		if len(split) != len(decoder) {
			t.Errorf("%s: the split holds %d tensors, the decoder has %d (of %d in the checkpoint)", name, len(split), len(decoder), len(all))
		}
		for n, l := range decoder {
			if split[n] != l {
				t.Errorf("%s: tensor %s: %d bytes in the split, %d in the checkpoint", name, n, split[n], l)
			}
		}
	}
}

// TestVisionLanguageRefusals: what a vision-language checkpoint may carry that layerstream does not run is
// refused, naming it: another decoder in text_config, a tensor outside the decoder's and the vision tower's
// prefixes, both layouts at once, the two tie_word_embeddings read differently by transformers 4 and 5, Gemma 3's
// final soft-cap its wrapper never applies, a wrapper key not known to concern images only.
func TestVisionLanguageRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, fixture string
		config        func(cfg map[string]any)
		rename        func(string) string
		extra         map[string][]int
		want          string
	}{
		{name: "Ministral 3 decoder", fixture: "mistral3-vl", want: `text_config.model_type "ministral3"`,
			config: func(cfg map[string]any) { cfg["text_config"].(map[string]any)["model_type"] = "ministral3" }},
		{name: "unknown wrapper key", fixture: "mistral3-vl", want: "vision_feature_select_strategy",
			config: func(cfg map[string]any) { cfg["vision_feature_select_strategy"] = "full" }},
		{name: "tie false over true", fixture: "gemma3-vl", want: "tie_word_embeddings is false at the top level",
			config: func(cfg map[string]any) { cfg["tie_word_embeddings"] = false }},
		{name: "final soft-cap", fixture: "gemma3-vl", want: "final_logit_softcapping 30",
			config: func(cfg map[string]any) { cfg["text_config"].(map[string]any)["final_logit_softcapping"] = 30.0 }},
		{name: "no text_config", fixture: "mistral3-vl", want: "text_config, which config.json lacks",
			config: func(cfg map[string]any) {
				for k, v := range cfg["text_config"].(map[string]any) {
					if k != "model_type" {
						cfg[k] = v
					}
				}
				delete(cfg, "text_config")
			}},
		{name: "stray tensor", fixture: "mistral3-vl", want: `"image_newline"`, extra: map[string][]int{"image_newline": {64}}},
		{name: "decoder outside language_model", fixture: "mistral3-vl", want: `"model.norm.weight"`,
			rename: func(n string) string { return strings.Replace(n, "language_model.model.norm.", "model.norm.", 1) }},
		{name: "both layouts", fixture: "gemma3-vl", want: "both layouts", extra: map[string][]int{"model.language_model.norm.weight": {64}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := hffixture.Checkpoint(t, tc.fixture, hffixture.V5)
			if tc.config != nil {
				editConfig(t, dir, tc.config)
			}
			if tc.rename != nil || tc.extra != nil {
				rename := tc.rename
				if rename == nil {
					rename = func(n string) string { return n }
				}
				relayout(t, dir, rename, tc.extra)
			}
			e, err := Open(context.Background(), dir, Options{})
			if err == nil {
				e.Close()
				t.Fatalf("opened; want an error naming %s", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not name %s", err, tc.want)
			}
		})
	}
}
