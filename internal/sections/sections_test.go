package sections

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/internal/testutil"
)

// TestSectionsAreHeadings: every section a warning names is a "## " heading of TROUBLESHOOTING.md, and every such
// heading has its constant.
func TestSectionsAreHeadings(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(testutil.RepoRoot(), File))
	if err != nil {
		t.Fatal(err)
	}
	var headings []string
	for line := range strings.SplitSeq(string(b), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			headings = append(headings, strings.TrimSpace(h))
		}
	}
	for _, s := range All() {
		if !slices.Contains(headings, s) {
			t.Errorf("section %q is not a heading of %s", s, File)
		}
	}
	for _, h := range headings {
		if !slices.Contains(All(), h) {
			t.Errorf("heading %q of %s has no constant in All()", h, File)
		}
	}
	// Links inside the document point at headings that exist.
	for _, part := range strings.Split(string(b), "](#")[1:] {
		anchor, _, _ := strings.Cut(part, ")")
		found := false
		for _, h := range headings {
			found = found || Anchor(h) == File+"#"+anchor
		}
		if !found {
			t.Errorf("link #%s matches no heading", anchor)
		}
	}
}

func TestAnchor(t *testing.T) {
	if got := Anchor(NaN); got != "TROUBLESHOOTING.md#nan-or-inf-in-logits" {
		t.Fatal(got)
	}
	if got := Anchor(Punctuation); got != "TROUBLESHOOTING.md#output-mostly-one-punctuation-mark-" {
		t.Fatal(got)
	}
}
