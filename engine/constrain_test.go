package engine

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/layerstream/layerstream/grammar"
	"github.com/layerstream/layerstream/internal/testutil"
)

// TestJSONConstraint generates under JSON schemas with stories260K, which knows no JSON: every text that ends
// with the stop token is a whole value of its schema, and the sequences of one batch keep their own constraints.
func TestJSONConstraint(t *testing.T) {
	t.Run("stories260K", func(t *testing.T) { checkJSONConstraint(t, testutil.SharedPath(t, "models", "stories260K-hf")) })
	t.Run("synthetic", func(t *testing.T) { checkJSONConstraint(t, tinyGGUF("F32")) }) // random weights, a GGUF tokenizer
}

func checkJSONConstraint(t *testing.T, model string) {
	e := open(t, model, Options{ShardDir: t.TempDir()})
	schemas := []string{
		`{"type": "object", "properties": {"name": {"type": "string"}, "ok": {"type": "boolean"}, "n": {"type": "integer"}}, "required": ["name", "ok"], "additionalProperties": false}`,
		`{"type": "array", "items": {"enum": ["cat", "dog", 3]}}`,
		`{"anyOf": [{"type": "null"}, {"type": "number"}]}`,
		`{"type": "object"}`,
	}
	var reqs []Request
	var checks []*grammar.Schema
	for _, s := range schemas {
		g, err := grammar.Compile([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		for seed := range 3 {
			c, err := e.JSONConstraint(g)
			if err != nil {
				t.Fatal(err)
			}
			ids, err := e.EncodePrompt("Once upon a time", nil)
			if err != nil {
				t.Fatal(err)
			}
			sm := Sampling{Temperature: 1, Seed: uint64(seed)}
			if seed == 0 {
				sm = Sampling{} // greedy
			}
			reqs = append(reqs, Request{PromptIDs: ids, MaxNewTokens: 120, Sampling: sm, Constraint: c})
			checks = append(checks, g)
		}
	}
	results, err := e.GenerateBatch(context.Background(), reqs, nil)
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := e.Tokenizer()
	ended := 0
	for i, res := range results {
		text := tok.Decode(res.GeneratedIDs, true)
		if res.StopReason != StopEOS {
			if !checks[i].Prefix(text) {
				t.Errorf("request %d: %q is no prefix of a value", i, text)
			}
			continue
		}
		ended++
		t.Logf("%d: %q", i, text)
		if !json.Valid([]byte(text)) || !checks[i].Match(text) {
			t.Errorf("request %d: %q is not a value of %s", i, text, schemas[i/3])
		}
	}
	if ended < 3 {
		t.Errorf("only %d of %d sequences ended with their value", ended, len(results))
	}
}

// TestJSONConstraintDraft: a constraint masks the logits before a draft token is verified too, so greedy
// constrained output with n-gram drafting is the output without drafting.
func TestJSONConstraintDraft(t *testing.T) {
	model := testutil.SharedPath(t, "models", "stories260K-hf")
	plain := open(t, model, Options{ShardDir: t.TempDir()})
	drafted := open(t, model, Options{ShardDir: t.TempDir(), Draft: DraftNgram})
	g := grammar.MustCompile(`{"type": "array", "items": {"type": "string"}}`)
	var got [2][]int
	for k, e := range []*Engine{plain, drafted} {
		c, err := e.JSONConstraint(g)
		if err != nil {
			t.Fatal(err)
		}
		ids, _ := e.EncodePrompt("Once upon a time", nil)
		res, err := e.Generate(context.Background(), Request{PromptIDs: ids, MaxNewTokens: 80, Constraint: c}, nil)
		if err != nil {
			t.Fatal(err)
		}
		got[k] = res.GeneratedIDs
		if k == 1 && res.Draft.Proposed == 0 {
			t.Error("no draft token was proposed: the check checked nothing")
		}
	}
	if !slices.Equal(got[0], got[1]) {
		t.Errorf("with a draft %v, without %v", got[1], got[0])
	}
	tok, _ := plain.Tokenizer()
	if text := tok.Decode(got[0], true); !g.Prefix(text) {
		t.Errorf("%q", text)
	}
}
