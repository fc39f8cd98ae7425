package gguf

import (
	"encoding/binary"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/quant"
)

func TestParseAllValueTypes(t *testing.T) {
	f := (&testFile{}).
		kv("u8", uint8(200)).kv("i8", int8(-5)).kv("u16", uint16(60000)).kv("i16", int16(-300)).
		kv("u32", uint32(4e9)).kv("i32", int32(-7)).kv("f32", float32(1.5)).kv("b", true).kv("s", "héllo").
		kv("u64", uint64(1)<<40).kv("i64", int64(-1)<<40).kv("f64", 2.25).
		kv("as", []string{"a", "", "ccc"}).kv("ai", []int32{1, -2, 3}).kv("af", []float32{0.5}).
		kv("ab", []bool{true, false}).kv("au8", []byte{1, 2}).
		kv("nested", []Value{{Type: TypeArray, Elem: TypeUint32, V: []uint32{7, 8}}}).
		kv("general.alignment", uint32(64))
	f.alignment = 64
	f.tensor("w", quant.F32, f32Bytes(1, 2, 3, 4), 2, 2).tensor("q", quant.Q8_0, make([]byte, 34), 32)
	g, err := parseBytes(t, f.bytes())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"u8": uint8(200), "i8": int8(-5), "u16": uint16(60000), "i16": int16(-300), "u32": uint32(4e9),
		"i32": int32(-7), "f32": float32(1.5), "b": true, "s": "héllo", "u64": uint64(1) << 40, "i64": int64(-1) << 40, "f64": 2.25}
	for k, w := range want {
		v, ok := g.Get(k)
		if !ok || v.V != w {
			t.Errorf("%s = %#v, want %#v", k, v.V, w)
		}
	}
	if s, _, _ := g.Strings("as"); !slices.Equal(s, []string{"a", "", "ccc"}) {
		t.Errorf("as = %q", s)
	}
	if s, _, _ := g.Ints("ai"); !slices.Equal(s, []int{1, -2, 3}) {
		t.Errorf("ai = %v", s)
	}
	if v, _ := g.Get("nested"); v.Elem != TypeArray || !slices.Equal(v.V.([]Value)[0].V.([]uint32), []uint32{7, 8}) {
		t.Errorf("nested = %#v", v)
	}
	if g.Alignment != 64 || g.DataOffset%64 != 0 {
		t.Errorf("alignment %d, data offset %d", g.Alignment, g.DataOffset)
	}
	w, _ := g.Tensor("w")
	q, _ := g.Tensor("q")
	if w.Size != 16 || w.Offset != g.DataOffset || q.Size != 34 || q.Offset != g.DataOffset+64 || !slices.Equal(w.Shape(), []int64{2, 2}) {
		t.Errorf("tensors %+v %+v (data at %d)", w, q, g.DataOffset)
	}
	if _, _, err := g.String("u8"); err == nil || !strings.Contains(err.Error(), "u8") {
		t.Errorf("String of a uint8 key: %v", err)
	}
	if v, _, err := g.Uint("i8"); err == nil {
		t.Errorf("Uint of -5 = %d, no error", v)
	}
}

// TestParseRejects checks that each malformed file gives an error that names what is wrong.
func TestParseRejects(t *testing.T) {
	base := func() *testFile {
		return (&testFile{}).kv("a", "x").tensor("t", quant.F32, f32Bytes(1, 2), 2)
	}
	u64 := func(v uint64) *uint64 { return &v }
	cases := []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "the file is empty (0 bytes): not a GGUF file"},
		{"3 bytes", []byte("GGU"), "the file is 3 bytes, too short for a GGUF header (24 bytes"},
		{"header cut", base().bytes()[:20], "the file is 20 bytes, too short for a GGUF header (24 bytes"},
		{"short, not GGUF", []byte("hello\n"), "bad magic"},
		{"magic", append([]byte("GGUX"), base().bytes()[4:]...), "bad magic"},
		{"v1", func() []byte { f := base(); f.version = 1; return f.bytes() }(), "version 1"},
		{"v4", func() []byte { f := base(); f.version = 4; return f.bytes() }(), "version 4"},
		{"big-endian", func() []byte { f := base(); f.version = 3 << 24; return f.bytes() }(), "big-endian"},
		{"unknown type", (&testFile{}).tensor("blk.0.x", quant.TQ1_0, make([]byte, 54), 256).bytes(), `"blk.0.x": TQ1_0 is not supported`},
		{"unnumbered type", (&testFile{}).tensor("x", quant.Type(99), make([]byte, 4), 1).bytes(), "type(99)"},
		{"partial block", (&testFile{}).tensor("x", quant.Q4_K, make([]byte, 144), 100).bytes(), "whole number of Q4_K blocks"},
		{"misaligned", func() []byte {
			f := base()
			f.tensors[0].offset = u64(4)
			return f.bytes()
		}(), "not a multiple of the alignment"},
		{"outside", func() []byte {
			f := base()
			f.tensors[0].offset = u64(1 << 20)
			return f.bytes()
		}(), "outside the"},
		{"overlap", func() []byte {
			f := base().tensor("u", quant.F32, f32Bytes(1, 2), 2)
			f.tensors[1].offset = u64(0)
			return f.bytes()
		}(), "overlap"},
		{"duplicate tensor", base().tensor("t", quant.F32, f32Bytes(1), 1).bytes(), `tensor "t" appears twice`},
		{"duplicate key", base().kv("a", "y").bytes(), `"a" appears twice`},
		{"alignment", base().kv("general.alignment", uint32(24)).bytes(), "not a power of two"},
		{"alignment type", base().kv("general.alignment", "32").bytes(), "general.alignment is a string"},
		{"zero dim", (&testFile{}).tensor("z", quant.F32, nil, 0).bytes(), `"z": dimension 0 is 0`},
		{"too many dims", (&testFile{}).tensor("d", quant.F32, f32Bytes(1), 1, 1, 1, 1, 1).bytes(), "5 dimensions"},
		{"bad bool", func() []byte {
			b := (&testFile{}).kv("flag", true).bytes()
			i := strings.Index(string(b), "flag") + 4 + 4
			b[i] = 7
			return b
		}(), `"flag"`},
	}
	for _, c := range cases {
		_, err := parseBytes(t, c.b)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

// TestParseLyingCounts checks that counts claiming more than the file holds fail before allocating.
func TestParseLyingCounts(t *testing.T) {
	good := (&testFile{}).kv("k", []string{"a", "b"}).tensor("t", quant.F32, f32Bytes(1), 1).bytes()
	le := binary.LittleEndian
	patch := func(off int, v uint64) []byte {
		b := slices.Clone(good)
		le.PutUint64(b[off:], v)
		return b
	}
	keyLen := 24                     // after magic, version, tensor count, kv count
	arrLen := keyLen + 8 + 1 + 4 + 4 // key length, "k", value type, element type
	for name, b := range map[string][]byte{
		"tensor count":   patch(8, math.MaxUint64),
		"kv count":       patch(16, 1<<62),
		"key length":     patch(keyLen, 1<<40),
		"array length":   patch(arrLen, 1<<61),
		"string in list": patch(arrLen+8, math.MaxUint64-3),
	} {
		_, err := parseBytes(t, b)
		if err == nil {
			t.Errorf("%s: a lying count parsed", name)
			continue
		}
		t.Logf("%s: %v", name, err)
	}
	// Every truncation of a valid file before its last tensor's end is an error, never a panic.
	g, err := parseBytes(t, good)
	if err != nil {
		t.Fatal(err)
	}
	last := g.Tensors[len(g.Tensors)-1]
	for n := range int(last.Offset + last.Size) {
		if _, err := parseBytes(t, good[:n]); err == nil {
			t.Fatalf("file truncated to %d of %d bytes parsed", n, len(good))
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add((&testFile{}).kv("a", "x").kv("n", []int32{1, 2}).tensor("t", quant.F32, f32Bytes(1, 2), 2).bytes())
	f.Add(tinyLlama(t4{}).bytes())
	f.Add(tinyLlama(t4{extraKV: []KV{{"tokenizer.ggml.token_type", Value{Type: TypeArray, Elem: TypeInt32, V: []int32{2, 3, 3, 6, 6, 1, 1, 99, 1, 1, 1, 1}}}}}).bytes())
	f.Add((&testFile{}).kv("nested", []Value{{Type: TypeArray, Elem: TypeString, V: []string{"x"}}}).bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := Parse(strings.NewReader(string(b)), int64(len(b)), "fuzz.gguf")
		if err != nil {
			return
		}
		for _, ti := range g.Tensors {
			if ti.Offset < g.DataOffset || ti.Offset+ti.Size > int64(len(b)) || ti.Offset%g.Alignment != 0 {
				t.Fatalf("tensor %q at [%d, +%d) escapes a %d-byte file (data at %d)", ti.Name, ti.Offset, ti.Size, len(b), g.DataOffset)
			}
		}
		// The model mapping must fail cleanly too.
		if ck, err := g.Checkpoint(); err == nil && ck.Config == nil {
			t.Fatal("checkpoint without a config")
		}
	})
}
