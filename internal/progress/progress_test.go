package progress

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestBar: on a terminal the bar redraws in place with percent, sizes, rate and ETA; elsewhere it writes only
// its final line.
func TestBar(t *testing.T) {
	var b bytes.Buffer
	bar := New(&b, "split", 0)
	bar.tty = true // as on a terminal
	bar.start = time.Now().Add(-time.Second)
	bar.Suffix = func() string { return "all 10%" }
	bar.Update(1_200_000_000, 2_860_000_000)
	bar.Update(2_860_000_000, 2_860_000_000)
	bar.Finish()
	s := b.String()
	for _, want := range []string{"\rsplit", " 42% [============>", "1.20 GB / 2.86 GB", "GB/s", "ETA ", "100% [====", "all 10%"} {
		if !strings.Contains(s, want) {
			t.Errorf("bar output %q lacks %q", s, want)
		}
	}
	if !strings.HasSuffix(s, "\n") {
		t.Errorf("bar output %q does not end its line", s)
	}

	b.Reset()
	plain := New(&b, "model.safetensors", 100)
	for i := range 10 {
		plain.Update(int64(100+i*10), 1000)
	}
	plain.Finish()
	if s := b.String(); strings.Count(s, "\n") != 1 || strings.Contains(s, "\r") || !strings.Contains(s, "model.safetensors") || !strings.Contains(s, "19%") {
		t.Errorf("plain output %q: want one final line", s)
	}
	// Work that failed before it began leaves no empty bar ("0% [>   ] 0 B / ?") above its error.
	b.Reset()
	for _, tty := range []bool{false, true} {
		idle := New(&b, "split", 0)
		idle.tty = tty
		idle.Finish()
	}
	if b.Len() != 0 {
		t.Errorf("a bar never updated drew %q", b.String())
	}
	var none *Bar
	none.Update(1, 2)
	none.Finish()
	if New(nil, "x", 0) != nil {
		t.Error("a bar without a writer")
	}
}

// TestCountBar: a bar of tokens shows counts and a rate in tokens, not bytes.
func TestCountBar(t *testing.T) {
	var b bytes.Buffer
	bar := NewCount(&b, "imatrix", "tokens")
	bar.start = time.Now().Add(-time.Second)
	bar.Update(2048, 4096)
	bar.Finish()
	s := b.String()
	for _, want := range []string{"imatrix", " 50% ", "2048 / 4096", "tokens/s"} {
		if !strings.Contains(s, want) {
			t.Errorf("bar output %q lacks %q", s, want)
		}
	}
	if strings.Contains(s, "KB") || strings.Contains(s, " B") {
		t.Errorf("bar output %q shows bytes", s)
	}
}
