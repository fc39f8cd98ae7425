package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/internal/testutil"
	"github.com/layerstream/layerstream/tokenizer"
)

func TestStopMatcher(t *testing.T) {
	for _, c := range []struct {
		stops  []string
		pieces []string
		want   []string // what each add gives out
		text   string   // the text at the end (after flush)
		stop   string
	}{
		{nil, []string{"a", "b"}, []string{"a", "b"}, "ab", ""},
		{[]string{"END"}, []string{"xx", "E", "N", "y"}, []string{"xx", "", "", "ENy"}, "xxENy", ""},
		{[]string{"END"}, []string{"xx", "EN", "Dzz"}, []string{"xx", "", ""}, "xx", "END"},
		{[]string{"END"}, []string{"xxEND", "zz"}, []string{"xx"}, "xx", "END"},
		{[]string{"ab", "b"}, []string{"xa", "b"}, []string{"x", ""}, "x", "ab"}, // the earliest match wins
		{[]string{"\n\n"}, []string{"one\n", "two\n", "\nthree"}, []string{"one", "\ntwo", ""}, "one\ntwo", "\n\n"},
		{[]string{"é!"}, []string{"caf", "é", "s"}, []string{"caf", "", "és"}, "cafés", ""},
	} {
		m := stopMatcher{stops: c.stops}
		var got []string
		hit := false
		for _, p := range c.pieces {
			out, h := m.add(p)
			got = append(got, out)
			if hit = h; hit {
				break
			}
		}
		if !hit {
			m.flush()
		}
		if strings.Join(got, "|") != strings.Join(c.want, "|") || m.text[:m.emitted] != c.text || (hit && m.stop != c.stop) || hit != (c.stop != "") {
			t.Errorf("stops %q pieces %q: gave %q, text %q (stop %q, hit %v); want %q, %q, %q", c.stops, c.pieces, got, m.text[:m.emitted], m.stop, hit, c.want, c.text, c.stop)
		}
	}
}

// FuzzStopMatcher: whatever the pieces, the text given out is the text up to the first stop string to appear
// as the pieces arrive (at the earliest start among those the piece that completes one completes), all of it
// when none does; nothing given out is taken back.
func FuzzStopMatcher(f *testing.F) {
	f.Add("hello world, the END is near", "END", "d,", 3)
	f.Add("aaab", "aab", "b", 1)
	f.Add("abaa", "aba", "b", 2) // "b" completes first: the text stops before it, although "aba" starts earlier
	f.Fuzz(func(t *testing.T, text, s1, s2 string, step int) {
		if s1 == "" || s2 == "" {
			return
		}
		step = 1 + (step%7+7)%7
		m := stopMatcher{stops: []string{s1, s2}}
		out, want := "", text
		hit, wantHit := false, false
		for i := 0; i < len(text); i += step {
			end := min(i+step, len(text))
			if !hit {
				var o string
				o, hit = m.add(text[i:end])
				out += o
			}
			if !wantHit {
				cut := -1
				for _, s := range []string{s1, s2} {
					if j := strings.Index(text[:end], s); j >= 0 && (cut < 0 || j < cut) {
						cut = j
					}
				}
				if cut >= 0 {
					want, wantHit = text[:cut], true
				}
			}
		}
		if !hit {
			out += m.flush()
		}
		if out != want || hit != wantHit {
			t.Fatalf("text %q stops %q %q step %d: gave %q (hit %v), want %q (hit %v)", text, s1, s2, step, out, hit, want, wantHit)
		}
	})
}

// TestGenerateText: the text is the decoded ids, the chunks concatenate to it, and a stop string ends the text
// before it.
func TestGenerateText(t *testing.T) {
	model := testutil.SharedPath(t, "models", "stories260K-hf")
	e := open(t, model, Options{})
	ctx := context.Background()
	tok, err := e.Tokenizer()
	if err != nil {
		t.Fatal(err)
	}
	var chunks []string
	res, err := e.GenerateText(ctx, TextRequest{Prompt: "Once upon a time", MaxNewTokens: 40, TopLogprobs: 2}, func(c TextChunk) error {
		chunks = append(chunks, c.Text)
		if c.Token != nil && (len(c.Token.TopLogprobs) != 2 || c.Token.TopLogprobs[0].Text == "") {
			t.Errorf("token %+v: want 2 top logprobs with their text", c.Token)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := tok.Decode(res.GeneratedIDs, true); res.Text != want || strings.Join(chunks, "") != want {
		t.Errorf("text %q, chunks %q; want the decoded ids %q", res.Text, chunks, want)
	}
	if !strings.HasPrefix(res.Text, ", there was a little girl named Lily.") {
		t.Errorf("text %q", res.Text)
	}
	chunks = nil
	stopped, err := e.GenerateText(ctx, TextRequest{Prompt: "Once upon a time", MaxNewTokens: 40, Stop: []string{"girl", "Lily"}}, func(c TextChunk) error {
		chunks = append(chunks, c.Text)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if stopped.Text != ", there was a little " || strings.Join(chunks, "") != stopped.Text || stopped.StopReason != StopString || stopped.Stop != "girl" {
		t.Errorf("with stop strings: %q (%s %q), chunks %q", stopped.Text, stopped.StopReason, stopped.Stop, chunks)
	}
	// Refusals are RequestErrors naming the field at fault.
	var re *RequestError
	for _, c := range []struct {
		req   TextRequest
		field string
	}{
		{TextRequest{Messages: []tokenizer.Message{{Role: "user", Content: "hi"}}}, FieldPrompt}, // no chat template
		{TextRequest{Prompt: "x", MaxNewTokens: 10000}, FieldMaxNewTokens},
		{TextRequest{Prompt: "x", Stop: []string{""}}, FieldStop},
		{TextRequest{PromptIDs: []int{1, 1 << 20}}, FieldPrompt},
		{TextRequest{}, FieldPrompt},
	} {
		if _, err := e.GenerateText(ctx, c.req, nil); !errors.As(err, &re) || re.Field != c.field {
			t.Errorf("%+v: got %v, want a RequestError naming %q", c.req, err, c.field)
		}
	}
}

// TestGenerateTextLogprobsCut (issue #36 case 7): the tokens reported with logprobs are those of the text
// given out: the tokens of a stop string the text leaves out are not, streamed or at the end.
func TestGenerateTextLogprobsCut(t *testing.T) {
	e := open(t, testutil.SharedPath(t, "models", "stories260K-hf"), Options{})
	for _, stop := range [][]string{nil, {"girl"}, {"ittle"}, {"Lily"}} {
		var tokens []*TextToken
		var text, joined string
		res, err := e.GenerateText(context.Background(), TextRequest{Prompt: "Once upon a time", MaxNewTokens: 40, Stop: stop, Logprobs: true}, func(c TextChunk) error {
			text += c.Text
			for _, t := range c.Tokens {
				if joined += t.Text; !strings.HasPrefix(text, joined) {
					return fmt.Errorf("token %q comes before its text (text so far %q)", t.Text, text)
				}
			}
			tokens = append(tokens, c.Tokens...)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case stop == nil && (joined != res.Text || len(tokens) != len(res.GeneratedIDs)):
			t.Errorf("no stop string: tokens %q (%d), want the text %q (%d tokens)", joined, len(tokens), res.Text, len(res.GeneratedIDs))
		case stop != nil && (res.StopReason != StopString || !strings.HasPrefix(res.Text, joined) || strings.Contains(joined, stop[0]) || len(tokens) >= len(res.GeneratedIDs)):
			t.Errorf("stop %q: text %q (%s), tokens %q (%d of %d): want the tokens of the text, without the stop string's", stop, res.Text, res.StopReason, joined, len(tokens), len(res.GeneratedIDs))
		}
	}
}

// TestGenerateTextChat: a chat is rendered with the model's template.
func TestGenerateTextChat(t *testing.T) {
	dir := testutil.ChatModel(t)
	e := open(t, dir, Options{})
	msgs := []tokenizer.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Once upon a time"}}
	res, err := e.GenerateText(context.Background(), TextRequest{Messages: msgs, MaxNewTokens: 5}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := e.Tokenizer()
	want, err := tok.Encode("system: Be brief.\nuser: Once upon a time\nassistant:", true)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.PromptIDs, want) {
		t.Errorf("prompt ids %v, want %v", res.PromptIDs, want)
	}
}

// TestTokenizerErrorNamesSource: a broken tokenizer.json is reported at the checkpoint folder the user gave,
// where it can be fixed, and at its copy in the shard folder that was read.
func TestTokenizerErrorNamesSource(t *testing.T) {
	dir := testutil.ChatModel(t)
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(`{"model": `), 0o644); err != nil {
		t.Fatal(err)
	}
	e := open(t, dir, Options{})
	_, err := e.Tokenizer()
	if err == nil {
		t.Fatal("a broken tokenizer.json was accepted")
	}
	abs, _ := filepath.Abs(dir)
	if want := fmt.Sprintf("tokenizer in %s (copied to %s): tokenizer.json", abs, e.Dir()); !strings.Contains(err.Error(), want) {
		t.Errorf("error %q\nlacks %q", err, want)
	}
}
