package grow

import "testing"

func TestSlice(t *testing.T) {
	s := Slice[float32](nil, 4)
	if len(s) != 4 || cap(s) != 4 {
		t.Fatalf("from nil: len %d cap %d, want 4 4", len(s), cap(s))
	}
	s[0] = 7
	r := Slice(s, 2)
	if len(r) != 2 || &r[0] != &s[0] || r[0] != 7 {
		t.Fatalf("shrinking did not reuse the buffer: len %d, first %v", len(r), r[0])
	}
	g := Slice(r, 5)
	if len(g) != 5 || &g[0] == &s[0] || g[0] != 0 {
		t.Fatalf("growing past the capacity: len %d, same buffer %v, first %v; want a new zeroed slice", len(g), &g[0] == &s[0], g[0])
	}
}
