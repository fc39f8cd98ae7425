package guard

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
	b, err := os.ReadFile(filepath.Join(testutil.RepoRoot(), TroubleshootingFile))
	if err != nil {
		t.Fatal(err)
	}
	var headings []string
	for line := range strings.SplitSeq(string(b), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			headings = append(headings, strings.TrimSpace(h))
		}
	}
	for _, s := range Sections() {
		if !slices.Contains(headings, s) {
			t.Errorf("section %q is not a heading of %s", s, TroubleshootingFile)
		}
	}
	for _, h := range headings {
		if !slices.Contains(Sections(), h) {
			t.Errorf("heading %q of %s has no constant in Sections()", h, TroubleshootingFile)
		}
	}
	// Links inside the document point at headings that exist.
	for _, part := range strings.Split(string(b), "](#")[1:] {
		anchor, _, _ := strings.Cut(part, ")")
		found := false
		for _, h := range headings {
			found = found || Anchor(h) == TroubleshootingFile+"#"+anchor
		}
		if !found {
			t.Errorf("link #%s matches no heading", anchor)
		}
	}
}
