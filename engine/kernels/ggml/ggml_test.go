package ggml

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"testing"
)

// vectors is testdata/vectors.json: what llama.cpp's libggml-cpu.so and glibc's libm return on seeded inputs
// (scripts/fixtures/ggml_vectors.py).
type vectors struct {
	Angles, Cos, Sin string
	Pow              []struct {
		Base       float32 `json:"base"`
		Dims       int     `json:"dims"`
		ThetaScale float32 `json:"theta_scale"`
	}
	ExpfIn    string  `json:"expf_in"`
	Expf      string  `json:"expf"`
	ExpfSumIn string  `json:"expf_sum_in"`
	ExpfSum   float64 `json:"expf_sum"`
	SiluIn    string  `json:"silu_in"`
	Silu      string
	Dots      []struct {
		X, Y   string
		Dot    float32
		DotF16 float32 `json:"dot_f16"`
	}
}

func loadVectors(t *testing.T) *vectors {
	t.Helper()
	b, err := os.ReadFile("testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v vectors
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return &v
}

func floats(t *testing.T, s string) []float32 {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	f := make([]float32, len(b)/4)
	for i := range f {
		f[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return f
}

// same compares bits, so that -0 and 0 differ and NaNs of one payload match.
func same(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }

// TestSinCosMatchGlibc: Sinf and Cosf equal glibc's sinf and cosf at the angles of four rotary tables, random
// arguments up to ±10⁵ and edge cases (tiny, π/4, 120, 3·10³⁸). Rounding math.Sin and math.Cos instead differs
// at 2% of them.
func TestSinCosMatchGlibc(t *testing.T) {
	v := loadVectors(t)
	x, c, s := floats(t, v.Angles), floats(t, v.Cos), floats(t, v.Sin)
	rounded := 0
	for i, a := range x {
		if !same(Cosf(a), c[i]) || !same(Sinf(a), s[i]) {
			t.Fatalf("x = %g: Cosf %g Sinf %g, glibc %g %g", a, Cosf(a), Sinf(a), c[i], s[i])
		}
		if float32(math.Cos(float64(a))) != c[i] || float32(math.Sin(float64(a))) != s[i] {
			rounded++
		}
	}
	t.Logf("%d angles equal; rounding math.Cos/math.Sin would give another value at %d", len(x), rounded)
	if rounded == 0 {
		t.Error("no angle where glibc differs from the nearest float: the vectors do not exercise Sinf and Cosf")
	}
}

func TestThetaScaleMatchesGlibc(t *testing.T) {
	for _, p := range loadVectors(t).Pow {
		if got := ThetaScale(p.Base, p.Dims); got != p.ThetaScale {
			t.Errorf("ThetaScale(%g, %d) = %.9g, glibc powf %.9g", p.Base, p.Dims, got, p.ThetaScale)
		}
	}
}

// TestExpfSiluMatchGGML: Expf is ggml_v_expf lane for lane (through ggml_vec_soft_max_f32 with max 0; its
// double sum of groups of 16 is SoftMax's), Silu is ggml_v_silu (through ggml_vec_swiglu_f32 with a gate of
// ones), over arguments that reach both cut-offs (-Inf and 0 included).
func TestExpfSiluMatchGGML(t *testing.T) {
	v := loadVectors(t)
	x, want := floats(t, v.ExpfIn), floats(t, v.Expf)
	for i, a := range x {
		if got := Expf(a); !same(got, want[i]) {
			t.Fatalf("Expf(%g) = %g, ggml %g", a, got, want[i])
		}
	}
	sum := 0.0
	var lanes [16]float32
	for i, a := range floats(t, v.ExpfSumIn) {
		lanes[i%16] = Expf(a)
		if i%16 == 15 {
			sum += float64(reduce16(&lanes))
		}
	}
	if sum != v.ExpfSum {
		t.Errorf("sum of the exponentials by groups of 16: %.17g, ggml %.17g", sum, v.ExpfSum)
	}
	x, want = floats(t, v.SiluIn), floats(t, v.Silu)
	for i, a := range x {
		if got := Silu(a); !same(got, want[i]) {
			t.Fatalf("Silu(%g) = %g, ggml %g", a, got, want[i])
		}
	}
}

// TestVecDotMatchesGGML: VecDot is ggml_vec_dot_f32 at lengths with and without a rest after the steps of 64,
// VecDotF16 ggml_vec_dot_f16 of the same rows rounded to float16.
func TestVecDotMatchesGGML(t *testing.T) {
	for _, d := range loadVectors(t).Dots {
		x, y := floats(t, d.X), floats(t, d.Y)
		if got := VecDot(x, y); !same(got, d.Dot) {
			t.Errorf("n = %d: VecDot %.9g, ggml %.9g", len(x), got, d.Dot)
		}
		roundHalf(x)
		roundHalf(y)
		if got := VecDotF16(x, y); !same(got, d.DotF16) {
			t.Errorf("n = %d: VecDotF16 %.9g, ggml_vec_dot_f16 %.9g", len(x), got, d.DotF16)
		}
	}
}

// TestFMA32 checks FMA32 against the exact a·b + c (math/big) rounded once, including cancellations and halfway
// cases where rounding a float64 sum to float32 would round twice.
func TestFMA32(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	exact := func(a, b, c float32) float32 {
		p := new(big.Float).SetPrec(200).Mul(big.NewFloat(float64(a)).SetPrec(200), big.NewFloat(float64(b)).SetPrec(200))
		p.Add(p, big.NewFloat(float64(c)).SetPrec(200))
		f, _ := p.Float32()
		return f
	}
	cases := [][3]float32{{1, 1, 0x1p-30}, {1 + 0x1p-23, 1 - 0x1p-23, -1}, {0x1p-12 + 0x1p-35, 1, 1}, {3, 0x1p-149, 0}}
	for range 200000 {
		a := float32(r.NormFloat64()) * float32(math.Ldexp(1, r.IntN(40)-20))
		b := float32(r.NormFloat64())
		c := -a*b + float32(r.NormFloat64())*float32(math.Ldexp(1, r.IntN(60)-50))
		cases = append(cases, [3]float32{a, b, c})
	}
	for _, c := range cases {
		if got, want := FMA32(c[0], c[1], c[2]), exact(c[0], c[1], c[2]); !same(got, want) {
			t.Fatalf("FMA32(%g, %g, %g) = %g, exact %g", c[0], c[1], c[2], got, want)
		}
	}
	if !math.IsInf(float64(FMA32(3e38, 10, 0)), 1) || FMA32(float32(math.NaN()), 1, 1) == FMA32(float32(math.NaN()), 1, 1) {
		t.Error("FMA32 does not pass overflow and NaN through")
	}
}

// TestAsmMatchesGo checks the AVX-512 twins against the Go functions, bit for bit, on random rows with large,
// tiny, zero, infinite and NaN values.
func TestAsmMatchesGo(t *testing.T) {
	if !useAVX512 {
		t.Skip("no AVX-512: the Go functions run")
	}
	r := rand.New(rand.NewPCG(5, 6))
	special := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 88.5, -104, 1e-40, -1e-30, 3e38}
	for _, n := range []int{16, 64, 128, 256, 1024} {
		x, y := make([]float32, n), make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64() * math.Ldexp(1, r.IntN(12)-4))
			y[i] = float32(r.NormFloat64())
		}
		for pass := range 2 { // finite rows, then with the special values
			if pass == 1 {
				for i, v := range special {
					x[(i*7)%n] = v
				}
			}
			if n%64 == 0 {
				if a, g := vecDot64AVX512(&x[0], &y[0], n), vecDot64(x, y); !same(a, g) {
					t.Errorf("n = %d, pass %d: VecDot assembly %g, Go %g", n, pass, a, g)
				}
			}
			if a, g := dot16AVX512(&x[0], &y[0], n), dot16(x, y); !same(a, g) {
				t.Errorf("n = %d, pass %d: Dot16 assembly %g, Go %g", n, pass, a, g)
			}
		}
		e, s := make([]float32, n), make([]float32, n)
		expfAVX512(&e[0], &x[0], n)
		siluAVX512(&s[0], &x[0], n)
		for i, v := range x {
			if !same(e[i], Expf(v)) || !same(s[i], Silu(v)) {
				t.Fatalf("x = %g: assembly expf %g silu %g, Go %g %g", v, e[i], s[i], Expf(v), Silu(v))
			}
		}
	}
}
