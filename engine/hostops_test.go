package engine

import (
	"slices"
	"testing"
)

// TestHostArena: an array handed out before a recycle is reused (as it is: ops overwrite it) by a later
// request of its length; the one kept stays untouched until the recycle after.
func TestHostArena(t *testing.T) {
	a := new(hostArena)
	x, y := a.array(2, 3), a.array(4)
	x.data[0], y.data[0] = 1, 2
	a.recycle(y)
	z := a.array(3, 2)
	if z != x || len(z.dims) != 2 || z.dims[0] != 3 {
		t.Fatalf("after a recycle: got %p %v %v, want x (%p) reused as [3 2]", z, z.data, z.dims, x)
	}
	if w := a.array(4); w == y || y.data[0] != 2 {
		t.Fatal("the kept array was handed out again before the next recycle")
	}
	a.recycle(nil)
	if !slices.Contains(a.free[4], y) {
		t.Fatal("the kept array was not recycled the time after")
	}
	var none *hostArena
	if f := none.array(5); len(f.data) != 5 {
		t.Fatal("a nil arena must hand out fresh arrays")
	}
}

// TestHostArenaEndPass: the arrays a pass used are there for the next one; those it did not use are let go, and
// so are all of them when they exceed arenaKeepBytes.
func TestHostArenaEndPass(t *testing.T) {
	a := new(hostArena)
	x, y := a.array(8), a.array(16)
	a.endPass()
	if got := a.array(8); got != x {
		t.Fatal("an array of the last pass was not reused by the next")
	}
	a.endPass() // y sat idle through this pass
	if l := a.free[16]; len(l) != 0 {
		t.Fatalf("an array no pass used is still kept: %d of length 16", len(l))
	}
	if got := a.array(8); got != x || got == y {
		t.Fatal("the array the last pass used was not reused")
	}
	big := a.array(arenaKeepBytes/4 + 1)
	a.endPass()
	if len(a.free) != 0 {
		t.Fatalf("a pass's %d bytes of arrays are kept, over arenaKeepBytes", 4*len(big.data)+4*len(x.data))
	}
}
