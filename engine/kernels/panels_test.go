package kernels

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"

	"github.com/layerstream/layerstream/quant"
)

// panelled returns a copy of w packed in panels, its data starting shift bytes into a 64-byte aligned buffer
// (the panel kernels put a panel's codes first or its meta first by where the panel starts).
func panelled(t *testing.T, w QuantMatrix, shift int) QuantMatrix {
	t.Helper()
	buf := make([]byte, len(w.Data)+128)
	off := (64 - int(uintptr(unsafe.Pointer(&buf[0]))%64)) % 64
	buf = buf[off+shift : off+shift+len(w.Data)]
	copy(buf, w.Data)
	v := w
	v.Data = buf
	v = PackPanels(v)
	if !v.Panelled() {
		t.Fatalf("%v [%d×%d] was not packed", w.Type, w.Rows, w.Cols)
	}
	return v
}

// TestPanelsMatchRows: a matrix packed in panels (PackPanels) gives LinearQuant's products of the matrix in rows
// bit for bit, at every row count 1-40, 64 and 200 (a prompt: Q6_K's back in rows), with a bias, for whole panels and a tail of rows, super-blocks a
// row even and odd (a Q6_K panel then starts mid cache line), its data aligned or not; its rows read back as
// they were (Row, DequantizeRow, RowRange).
func TestPanelsMatchRows(t *testing.T) {
	var rowCounts []int
	for rows := 1; rows <= 40; rows++ {
		rowCounts = append(rowCounts, rows)
	}
	rowCounts = append(rowCounts, 64, 200)
	if len(panelFormats) == 0 {
		t.Skip("no panel kernels on this CPU (AVX-512 VNNI)")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, typ := range []quant.Type{quant.Q4_K, quant.Q6_K} {
		for _, sh := range [][2]int{{16, 256}, {40, 1536}, {48, 256 * 35}, {37, 768}} {
			out, in := sh[0], sh[1]
			w := randomQuantMatrix(t, rng, typ, out, in)
			bias := make([]float32, out)
			for i := range bias {
				bias[i] = rng.Float32() - 0.5
			}
			for _, shift := range []int{0, 32} {
				p := panelled(t, w, shift)
				name := fmt.Sprintf("%v/%dx%d/shift%d", typ, out, in, shift)
				for _, rows := range rowCounts {
					x := make([]float32, rows*in)
					for i := range x {
						x[i] = float32(rng.NormFloat64())
					}
					want, got := make([]float32, rows*out), make([]float32, rows*out)
					LinearQuant(want, x, w, bias)
					LinearQuant(got, x, p, bias)
					if !slices.Equal(want, got) {
						t.Fatalf("%s, %d rows: the panel kernels differ from the rows'", name, rows)
					}
				}
				for o := range out {
					if !slices.Equal(p.Row(o), w.Row(o)) {
						t.Fatalf("%s: row %d unpacks differently", name, o)
					}
				}
				a, b := make([]float32, in), make([]float32, in)
				w.DequantizeRow(a, out-1)
				p.DequantizeRow(b, out-1)
				if !slices.Equal(a, b) {
					t.Fatalf("%s: DequantizeRow differs", name)
				}
				for _, rr := range [][2]int{{0, 16}, {16, out - 16}, {3, 9}} {
					v, u := p.RowRange(rr[0], rr[1]), w.RowRange(rr[0], rr[1])
					x := make([]float32, 3*in)
					for i := range x {
						x[i] = float32(rng.NormFloat64())
					}
					want, got := make([]float32, 3*u.Rows), make([]float32, 3*v.Rows)
					LinearQuant(want, x, u, nil)
					LinearQuant(got, x, v, nil)
					if !slices.Equal(want, got) {
						t.Fatalf("%s: RowRange(%d, %d) differs", name, rr[0], rr[1])
					}
				}
			}
		}
	}
}

// TestProductAllocs: a product allocates nothing a panel, in panels or in rows. A kernel's sums live in the
// pooled panel scratch: a local array passed to a kernel called through a function value moved to the heap at
// every panel, 560 allocations an 8-row product of [8960×1536] Q4_K in panels and a third of its time.
func TestProductAllocs(t *testing.T) {
	const in, out = 512, 64 * tileRows
	rng := rand.New(rand.NewPCG(7, 8))
	for _, typ := range []quant.Type{quant.Q4_K, quant.Q6_K} {
		w := randomQuantMatrix(t, rng, typ, out, in)
		layouts := []QuantMatrix{w}
		if Packs(typ) {
			layouts = append(layouts, panelled(t, w, 0))
		}
		for _, m := range layouts {
			for _, rows := range []int{1, 4, 8, 16, 64} {
				x, y := make([]float32, rows*in), make([]float32, rows*out)
				for i := range x {
					x[i] = rng.Float32() - 0.5
				}
				LinearQuant(y, x, m, nil) // the pools filled
				// A handful a call (the workers' closure, a pool refilled after a collection), none a panel.
				if n := testing.AllocsPerRun(20, func() { LinearQuant(y, x, m, nil) }); n > 8 {
					t.Errorf("%v [%d×%d], panels %v, %d rows: %.1f allocations a product, want a handful (not one a panel: %d panels)",
						typ, out, in, m.Panelled(), rows, n, out/tileRows)
				}
			}
		}
	}
}
