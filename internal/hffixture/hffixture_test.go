package hffixture

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
)

// The fixtures the team's engine tests rely on: a missing one is a failure, not a skip.
var required = []string{
	"llama2", "llama-untied", "llama3-rope-llama3", "llama-rope-linear", "llama-rope-dynamic", "llama-rope-yarn",
	"llama-bias", "mistral-sliding", "qwen2", "qwen2-sliding", "qwen3", "gemma3-vl", "mistral3-vl",
}

func TestNamesHasRequired(t *testing.T) {
	names := Names()
	for _, n := range required {
		if !slices.Contains(names, n) {
			t.Errorf("fixture %q missing from testdata/hf (have %v)", n, names)
		}
	}
}

type config struct {
	VocabSize         int                        `json:"vocab_size"`
	TieWordEmbeddings *bool                      `json:"tie_word_embeddings"`
	RopeParameters    map[string]json.RawMessage `json:"rope_parameters"`
	RopeTheta         *float64                   `json:"rope_theta"`
	RopeLocalBase     *float64                   `json:"rope_local_base_freq"`
	DType             string                     `json:"dtype"`
	TorchDType        string                     `json:"torch_dtype"`
}

func readConfig(t *testing.T, path string) (config, map[string]any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var c config
	var all map[string]any
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if err := json.Unmarshal(b, &all); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	// A vision-language wrapper keeps its decoder's keys in text_config, its dtype at the top level.
	if text, ok := all["text_config"].(map[string]any); ok {
		tb, _ := json.Marshal(text)
		if err := json.Unmarshal(tb, &c); err != nil {
			t.Fatalf("%s: text_config: %v", path, err)
		}
		for k, v := range text {
			all[k] = v
		}
	}
	return c, all
}

// TestFixturesComplete checks every fixture folder: both configs in their spelling (only the transformers-5 one
// for a family transformers 4.57 lacks, as manifest.json's no_v4 says), the weights parse, the reference tensors
// have the documented shapes (a 40-token prompt, or the manifest's prompt_len) and agree with the config (vocab,
// ids in range), and the first greedy id is the argmax of the last prompt row.
func TestFixturesComplete(t *testing.T) {
	names := Names()
	if len(names) == 0 {
		t.Fatal("no fixture found under testdata/hf")
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			dir, err := Dir(name)
			if err != nil {
				t.Fatal(err)
			}
			v5, all5 := readConfig(t, filepath.Join(dir, "config.json"))
			entry := manifestEntry(t, name)
			if v5.DType != "float32" || all5["rope_scaling"] != nil || v5.RopeTheta != nil && v5.RopeParameters == nil {
				t.Errorf("config.json is not in the transformers-5 spelling (rope_parameters, dtype)")
			}
			if entry.NoV4 != nil {
				if HasSpelling(name, V4) {
					t.Errorf("manifest.json says no_v4 (%v), but config.v4.json exists", entry.NoV4)
				}
				checkWeightsAndReference(t, name, dir, v5, entry.PromptLen)
				return
			}
			if v5.RopeParameters == nil {
				t.Errorf("config.json has no rope_parameters")
			}
			v4, all4 := readConfig(t, filepath.Join(dir, "config.v4.json"))
			if v4.RopeParameters != nil || (v4.RopeTheta == nil && v4.RopeLocalBase == nil) {
				t.Errorf("config.v4.json is not in the transformers-4 spelling (top-level rope_theta)")
			}
			if v4.RopeTheta != nil && *v4.RopeTheta == 10000 {
				t.Errorf("config.v4.json: rope_theta is the default 10000; fixtures use another so a misread fails")
			}
			if v5.VocabSize == 0 || v5.VocabSize != v4.VocabSize {
				t.Errorf("vocab_size %d (v5) vs %d (v4)", v5.VocabSize, v4.VocabSize)
			}
			if all5["model_type"] != all4["model_type"] || all5["num_hidden_layers"] != all4["num_hidden_layers"] {
				t.Errorf("config.json and config.v4.json describe different models")
			}
			checkWeightsAndReference(t, name, dir, v5, entry.PromptLen)
		})
	}
}

// manifestFixture is what TestFixturesComplete reads of a fixture's manifest.json entry.
type manifestFixture struct {
	NoV4      any `json:"no_v4"`
	PromptLen int `json:"prompt_len"`
}

// manifestEntry returns the fixture's entry of testdata/hf/manifest.json.
func manifestEntry(t *testing.T, name string) manifestFixture {
	t.Helper()
	dir, err := Testdata("hf")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Fixtures map[string]manifestFixture `json:"fixtures"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	e, ok := m.Fixtures[name]
	if !ok {
		t.Fatalf("manifest.json has no entry for %s", name)
	}
	return e
}

// checkWeightsAndReference checks a fixture's weights (float32, lm_head as tie_word_embeddings says) and its
// reference outputs (promptLen input ids, 40 when 0; 20 greedy ids; vocab; finite logits; greedy id 0 the argmax).
func checkWeightsAndReference(t *testing.T, name, dir string, v5 config, promptLen int) {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	tensors, err := checkpoint.ParseSafetensors(f, st.Size(), "model.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	hasHead := false
	for _, ti := range tensors {
		if ti.DType != checkpoint.F32 {
			t.Errorf("weight %s is %s, want F32", ti.Name, ti.DType)
		}
		if ti.Name == "lm_head.weight" || ti.Name == "language_model.lm_head.weight" {
			hasHead = true
		}
	}
	tied := v5.TieWordEmbeddings != nil && *v5.TieWordEmbeddings
	if hasHead == tied {
		t.Errorf("tie_word_embeddings %v but lm_head.weight present: %v", tied, hasHead)
	}

	ref, err := LoadReference(name)
	if err != nil {
		t.Fatal(err)
	}
	if promptLen == 0 {
		promptLen = 40
	}
	if len(ref.InputIDs) != promptLen || len(ref.GreedyIDs) != 20 || ref.Vocab != v5.VocabSize {
		t.Fatalf("reference: %d input ids, %d greedy ids, vocab %d (config %d)", len(ref.InputIDs), len(ref.GreedyIDs), ref.Vocab, v5.VocabSize)
	}
	for _, id := range slices.Concat(ref.InputIDs, ref.GreedyIDs) {
		if id < 0 || id >= int64(ref.Vocab) {
			t.Fatalf("id %d outside the vocabulary (%d)", id, ref.Vocab)
		}
	}
	for i, v := range ref.Logits {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatalf("logit %d is %v", i, v)
		}
	}
	if got := argmax(ref.Row(len(ref.InputIDs) - 1)); int64(got) != ref.GreedyIDs[0] {
		t.Errorf("first greedy id %d, argmax of the last prompt row %d", ref.GreedyIDs[0], got)
	}
	if full := ref.Tensors["full_logits"]; full != nil {
		ids := ref.Tensors["full_ids"]
		if ids == nil || !slices.Equal(ids.I64, slices.Concat(ref.InputIDs, ref.GreedyIDs)) {
			t.Errorf("full_ids must be input_ids followed by greedy_ids")
		}
		if len(full.Shape) != 2 || full.Shape[0] != 60 || full.Shape[1] != ref.Vocab {
			t.Errorf("full_logits shape %v", full.Shape)
		}
	}
}

func argmax(row []float32) int {
	best := 0
	for i, v := range row {
		if v > row[best] {
			best = i
		}
	}
	return best
}

func TestCheckpoint(t *testing.T) {
	names := Names()
	if len(names) == 0 {
		t.Fatal("no fixture")
	}
	name := names[0]
	for _, sp := range Spellings {
		dir := Checkpoint(t, name, sp)
		want, err := os.ReadFile(filepath.Join(must(Dir(name)), configFiles[sp]))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(dir, "config.json"))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%s: config.json is not %s", sp, configFiles[sp])
		}
		for _, f := range []string{"model.safetensors"} {
			if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
				t.Errorf("%s: %v", sp, err)
			}
		}
		for _, f := range []string{ReferenceFile, "config.v4.json"} {
			if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
				t.Errorf("%s: %s copied into the checkpoint", sp, f)
			}
		}
	}
	if _, err := CheckpointIn(t.TempDir(), name, "v3"); err == nil {
		t.Error("unknown spelling accepted")
	}
	if _, err := CheckpointIn(t.TempDir(), "no-such-fixture", V5); err == nil {
		t.Error("unknown fixture accepted")
	}
	if _, err := Dir("../hf"); err == nil {
		t.Error("a path accepted as a fixture name")
	}
}

func TestReadSafetensorsErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	header := func(h string, data int) []byte {
		b := make([]byte, 8, 8+len(h)+data)
		b[0] = byte(len(h))
		b = append(b, h...)
		return append(b, make([]byte, data)...)
	}
	cases := map[string][]byte{
		"short":     {1, 2},
		"bad-len":   {200, 0, 0, 0, 0, 0, 0, 0, '{', '}'},
		"bad-json":  header(`{"a":`, 0),
		"dtype":     header(`{"a":{"dtype":"F16","shape":[1],"data_offsets":[0,2]}}`, 2),
		"offsets":   header(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, 4),
		"shape-len": header(`{"a":{"dtype":"I64","shape":[2],"data_offsets":[0,8]}}`, 8),
	}
	for name, b := range cases {
		if _, err := ReadSafetensors(write(name, b)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	ok := header(`{"a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}}`, 8)
	ok[len(ok)-8] = 7
	m, err := ReadSafetensors(write("ok", ok))
	if err != nil || m["a"].I64[0] != 7 {
		t.Errorf("valid file: %v %v", m, err)
	}
}

func must(s string, err error) string {
	if err != nil {
		panic(err)
	}
	return s
}

func TestChatFixtures(t *testing.T) {
	models := ChatModels()
	if len(models) < 12 {
		t.Fatalf("%d chat fixtures, want at least 12: %v", len(models), models)
	}
	for _, m := range models {
		c, err := LoadChat(m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Now(); err != nil {
			t.Errorf("%s: strftime_now %q: %v", m, c.StrftimeNow, err)
		}
		if c.Template == "" || len(c.Cases) == 0 {
			t.Errorf("%s: empty template or no case", m)
		}
		for _, k := range c.Cases {
			if (k.Expected == "") == (k.Error == "") {
				t.Errorf("%s/%s: want exactly one of expected and error", m, k.Name)
			}
		}
	}
}
