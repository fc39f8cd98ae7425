package textout

import (
	"errors"
	"strings"
	"testing"
)

type failAfter struct{ n int }

func (f *failAfter) Write(p []byte) (int, error) {
	if f.n == 0 {
		return 0, errors.New("disk full")
	}
	f.n--
	return len(p), nil
}

func TestWriterKeepsFirstError(t *testing.T) {
	var b strings.Builder
	w := &Writer{W: &b}
	w.Printf("%d %s\n", 1, "a")
	if w.Err != nil || b.String() != "1 a\n" {
		t.Fatalf("%q %v", b.String(), w.Err)
	}
	f := &failAfter{n: 1}
	w = &Writer{W: f}
	w.Printf("ok\n")
	w.Printf("fails\n")
	w.Printf("skipped\n")
	if w.Err == nil || w.Err.Error() != "disk full" || f.n != 0 {
		t.Fatalf("err %v", w.Err)
	}
}
