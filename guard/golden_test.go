package guard_test

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/guard"
	"github.com/layerstream/layerstream/internal/testutil"
	"github.com/layerstream/layerstream/reference"
)

// pieces returns each token's text from a SentencePiece-style tokenizer.json: "▁" is a space and "<0xNN>" a byte.
func pieces(t *testing.T, path string) map[int]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var tj struct {
		Model struct{ Vocab map[string]int } `json:"model"`
	}
	if err := json.Unmarshal(b, &tj); err != nil {
		t.Fatal(err)
	}
	out := map[int]string{}
	for p, id := range tj.Model.Vocab {
		if strings.HasPrefix(p, "<0x") && len(p) == 6 {
			if v, err := strconv.ParseUint(p[3:5], 16, 8); err == nil {
				out[id] = string([]byte{byte(v)})
				continue
			}
		}
		out[id] = strings.ReplaceAll(p, "▁", " ")
	}
	return out
}

// TestNoFalseAlarmOnGolden feeds every golden stories260K generation through a strict Monitor: the generated tokens
// through ObserveToken, and the model's real logits at every generated step (from the float64 reference, rounded to
// float32 as an engine returns them) through CheckLogits. The stories repeat words and phrases; none may trip.
func TestNoFalseAlarmOnGolden(t *testing.T) {
	cases := testutil.StoriesGolden(t)
	dir := testutil.SharedPath(t, "models", "stories260K-hf")
	text := pieces(t, dir+"/tokenizer.json")
	ck, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		m := guard.NewMonitor(guard.MonitorOptions{Strict: true})
		var out strings.Builder
		for i, id := range c.GeneratedIDs {
			if err := m.ObserveToken(id, text[id]); err != nil {
				t.Fatalf("%q token %d: false alarm: %v", c.Prompt, i, err)
			}
			out.WriteString(text[id])
		}
		if !strings.Contains(c.Text, strings.TrimSpace(out.String())[:40]) {
			t.Fatalf("token texts do not rebuild the golden text: %q", out.String())
		}

		ids := append(append([]int{}, c.PromptIDs...), c.GeneratedIDs...)
		ref, err := reference.Forward(ck, ids[:len(ids)-1])
		if err != nil {
			t.Fatal(err)
		}
		logits := make([]float32, ck.Config.VocabSize)
		for step := range c.GeneratedIDs {
			for i, v := range ref.Logits[len(c.PromptIDs)-1+step] {
				logits[i] = float32(v)
			}
			if err := m.CheckLogits(step, logits); err != nil {
				t.Fatalf("%q step %d: false alarm: %v", c.Prompt, step, err)
			}
		}
		t.Logf("%q: %d tokens, no alarm", c.Prompt, len(c.GeneratedIDs))
	}
}

// TestNoFalseAlarmEngine runs the golden generations through the engine with a strict Monitor checking the
// logits of every step, and the generated tokens through ObserveToken: no alarm.
func TestNoFalseAlarmEngine(t *testing.T) {
	cases := testutil.StoriesGolden(t)
	dir := testutil.SharedPath(t, "models", "stories260K-hf")
	text := pieces(t, dir+"/tokenizer.json")
	m := guard.NewMonitor(guard.MonitorOptions{Strict: true})
	e, err := engine.Open(context.Background(), dir, engine.Options{Monitor: m, ShardDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for _, c := range cases {
		m.Reset()
		res, err := e.Generate(context.Background(), engine.Request{PromptIDs: c.PromptIDs, MaxNewTokens: len(c.GeneratedIDs)},
			func(tok engine.Token) error { return m.ObserveToken(tok.ID, text[tok.ID]) })
		if err != nil {
			t.Fatalf("false alarm: %v", err)
		}
		if len(res.GeneratedIDs) == 0 {
			t.Fatal("nothing generated")
		}
	}
}
