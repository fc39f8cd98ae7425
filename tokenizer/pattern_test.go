package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/dlclark/regexp2"
)

// splits returns the matches of m in s as strings.
func splits(m matcher, s string) []string {
	var out []string
	m.findAll(s, func(start, end int) { out = append(out, s[start:end]) })
	return out
}

var handWritten = []struct {
	name    string
	pattern string
	m       *splitPattern
}{
	{"gpt2", gpt2Pattern, gpt2Split},
	{"llama3", llama3Pattern, llama3Split},
	{"qwen", qwenPattern, qwenSplit},
}

// checkAgainstRegexp2 compares a hand-written matcher with regexp2 running the pattern it replaces.
func checkAgainstRegexp2(t *testing.T, s string) {
	t.Helper()
	for _, h := range handWritten {
		re := regexMatcher{regexp2.MustCompile(h.pattern, regexp2.None)}
		want, got := splits(re, s), splits(h.m, s)
		if !slices.Equal(got, want) {
			t.Fatalf("%s on %q:\n got %q\nwant %q", h.name, s, got, want)
		}
	}
}

func TestSplitPatternExamples(t *testing.T) {
	for _, s := range append(extraTexts,
		"", "a", " ", "  ", "x  ", "  x", "\n", " \n ", "a\n\n\nb", "tab\there", "I'm you're THEY'LL 'twas 'ſ",
		"1234567 89", " 12 ab12cd", "!!! ?? ...\n\n", " (hello) [x]", "a  \t\n  b", "\u00a0x \u2003y", "ǅungla", "Ⅻ ½ ²",
		"x'", "'", "''", "' s", "foo'bar", "\r\n\r", "  \r\n  \r\n") {
		checkAgainstRegexp2(t, s)
	}
}

func TestSplitPatternRandom(t *testing.T) {
	alphabet := []string{"a", "Z", "é", "中", "1", "٣", "½", " ", "  ", "\t", "\n", "\r", "'", "s", "S", "ll", "RE",
		"!", "(", "_", "-", "🙂", "\u00a0", "\u2028", "\u0301", "'ve", "'D"}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		var sb strings.Builder
		for range r.IntN(12) {
			sb.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		checkAgainstRegexp2(t, sb.String())
	}
}

func FuzzSplitPattern(f *testing.F) {
	for _, s := range extraTexts {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !isValidText(s) {
			return
		}
		checkAgainstRegexp2(t, s)
	})
}

func isValidText(s string) bool { return strings.ToValidUTF8(s, "") == s }
