package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/engine/kernels"
	"github.com/layerstream/layerstream/internal/sections"
	"github.com/layerstream/layerstream/internal/testutil"
)

// fixtureCopy copies testdata/hf/<name> (its transformers-4 config.v4.json as config.json, the weights and
// transformers' reference outputs) into a temporary folder, applying edit to the config.
func fixtureCopy(t *testing.T, name string, edit func(cfg map[string]any)) string {
	t.Helper()
	src := filepath.Join(testutil.RepoRoot(), "testdata", "hf", name)
	dst := t.TempDir()
	for from, to := range map[string]string{"config.v4.json": "config.json", "model.safetensors": "model.safetensors",
		"generation_config.json": "generation_config.json", "reference.safetensors": "reference.safetensors"} {
		b, err := os.ReadFile(filepath.Join(src, from))
		if err != nil {
			t.Fatal(err)
		}
		if to == "config.json" && edit != nil {
			var cfg map[string]any
			if err := json.Unmarshal(b, &cfg); err != nil {
				t.Fatal(err)
			}
			edit(cfg)
			b, _ = json.Marshal(cfg)
		}
		if err := os.WriteFile(filepath.Join(dst, to), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// Issue #13 (case 1's last line): verify passed a misread config, because its float64 reference reads config.json
// through the same code as the engine. With transformers' own outputs beside the checkpoint it compares with them
// too: a config whose rope_theta disagrees with the weights (here edited; in the issue, ignored) now fails.
func TestVerifyAgainstTransformers(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("LAYERSTREAM_CACHE", cache)
	var errb bytes.Buffer
	code, out := runCapturingStdout(t, []string{"verify", "--model", fixtureCopy(t, "llama2", nil)}, &errb)
	if code != 0 || !strings.Contains(string(out), "streamed vs transformers") {
		t.Fatalf("the fixture as transformers saved it: exit %d\n%s%s", code, out, errb.String())
	}
	misread := fixtureCopy(t, "llama2", func(cfg map[string]any) { cfg["rope_theta"] = 10000.0 })
	errb.Reset()
	code, out = runCapturingStdout(t, []string{"verify", "--model", misread}, &errb)
	if code != 1 || !strings.Contains(string(out), "streamed vs transformers") || !strings.Contains(errb.String(), sections.Anchor(sections.VerifyMismatch)) {
		t.Fatalf("rope_theta 10000 instead of 100000: exit %d, want 1 naming %s\n%s%s", code, sections.VerifyMismatch, out, errb.String())
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "streamed vs reference") && !strings.HasSuffix(line, " ok") {
			t.Errorf("the float64 reference should agree with the engine on the misread config: %s", line)
		}
	}
}

// brokenCache imitates an engine whose decode steps attend to nothing (a key/value cache that was never filled):
// every step after the first gets the log-probabilities of its last token computed alone.
type brokenCache struct{ *engine.Engine }

func (b brokenCache) Generate(ctx context.Context, req engine.Request, onToken func(engine.Token) error) (*engine.Result, error) {
	var toks []engine.Token
	res, err := b.Engine.Generate(ctx, req, func(t engine.Token) error { toks = append(toks, t); return nil })
	if err != nil {
		return res, err
	}
	for i, t := range toks {
		if i > 0 {
			alone, err := b.Engine.Logits(ctx, []int{toks[i-1].ID})
			if err != nil {
				return res, err
			}
			lse := kernels.LogSumExp(alone[0])
			for j := range t.TopLogprobs {
				t.TopLogprobs[j].Logprob = float64(alone[0][t.TopLogprobs[j].ID]) - lse
			}
		}
		if err := onToken(t); err != nil {
			return res, err
		}
	}
	return res, nil
}

// verify checks the engine's decode steps against its own full forward pass, so a broken key/value cache fails
// it, naming the section "KV cache not filled, every step re-runs the whole forward".
func TestVerifyCatchesBrokenKVCache(t *testing.T) {
	model := testutil.SharedPath(t, "models", "stories260K-hf")
	o := verifyOptions{model: model, ids: []int{1, 403, 407, 261, 378}, dtype: "auto", decodeSteps: 8}
	var out bytes.Buffer
	if err := runVerify(context.Background(), o, &out); err != nil || !strings.Contains(out.String(), "decode steps vs one pass") {
		t.Fatalf("healthy: %v\n%s", err, out.String())
	}
	o.broken = func(e *engine.Engine) decoder { return brokenCache{e} }
	out.Reset()
	err := runVerify(context.Background(), o, &out)
	if err == nil || !strings.Contains(err.Error(), sections.Anchor(sections.KVCache)) || !strings.Contains(out.String(), "FAIL") {
		t.Fatalf("broken cache: %v\n%s", err, out.String())
	}
}
