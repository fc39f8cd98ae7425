package gguf

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"

	"github.com/layerstream/layerstream/quant"
)

// testFile builds GGUF bytes for tests: metadata in order, then tensors laid out with the alignment.
type testFile struct {
	version   uint32
	kvs       []KV
	tensors   []testTensor
	alignment int64
}

type testTensor struct {
	name string
	dims []uint64
	typ  quant.Type
	data []byte
	// offset, when set (>= 0 after adding 1), overrides the computed offset (for malformed files).
	offset *uint64
}

func (f *testFile) kv(key string, v any) *testFile {
	val := Value{V: v}
	switch x := v.(type) {
	case uint8:
		val.Type = TypeUint8
	case int8:
		val.Type = TypeInt8
	case uint16:
		val.Type = TypeUint16
	case int16:
		val.Type = TypeInt16
	case uint32:
		val.Type = TypeUint32
	case int32:
		val.Type = TypeInt32
	case float32:
		val.Type = TypeFloat32
	case bool:
		val.Type = TypeBool
	case string:
		val.Type = TypeString
	case uint64:
		val.Type = TypeUint64
	case int64:
		val.Type = TypeInt64
	case float64:
		val.Type = TypeFloat64
	case []string:
		val.Type, val.Elem = TypeArray, TypeString
	case []int32:
		val.Type, val.Elem = TypeArray, TypeInt32
	case []float32:
		val.Type, val.Elem = TypeArray, TypeFloat32
	case []uint32:
		val.Type, val.Elem = TypeArray, TypeUint32
	case []byte:
		val.Type, val.Elem = TypeArray, TypeUint8
	case []bool:
		val.Type, val.Elem = TypeArray, TypeBool
	case []Value:
		val.Type, val.Elem = TypeArray, TypeArray
	default:
		panic(x)
	}
	f.kvs = append(f.kvs, KV{Key: key, Value: val})
	return f
}

func (f *testFile) tensor(name string, typ quant.Type, data []byte, dims ...uint64) *testFile {
	f.tensors = append(f.tensors, testTensor{name: name, dims: dims, typ: typ, data: data})
	return f
}

func putString(b *bytes.Buffer, s string) {
	binary.Write(b, binary.LittleEndian, uint64(len(s)))
	b.WriteString(s)
}

func putValue(b *bytes.Buffer, v Value) {
	le := binary.LittleEndian
	switch x := v.V.(type) {
	case string:
		putString(b, x)
	case bool:
		if x {
			b.WriteByte(1)
		} else {
			b.WriteByte(0)
		}
	case []string:
		binary.Write(b, le, uint32(TypeString))
		binary.Write(b, le, uint64(len(x)))
		for _, s := range x {
			putString(b, s)
		}
	case []Value:
		binary.Write(b, le, uint32(TypeArray))
		binary.Write(b, le, uint64(len(x)))
		for _, e := range x {
			putValue(b, e)
		}
	case []int32, []float32, []uint32, []byte, []bool:
		binary.Write(b, le, uint32(v.Elem))
		n := map[ValueType]int{TypeInt32: 4, TypeFloat32: 4, TypeUint32: 4, TypeUint8: 1, TypeBool: 1}[v.Elem]
		var buf bytes.Buffer
		binary.Write(&buf, le, x)
		binary.Write(b, le, uint64(buf.Len()/n))
		b.Write(buf.Bytes())
	default:
		binary.Write(b, le, x)
	}
}

func (f *testFile) bytes() []byte {
	le := binary.LittleEndian
	var b bytes.Buffer
	b.WriteString(Magic)
	v := f.version
	if v == 0 {
		v = 3
	}
	binary.Write(&b, le, v)
	binary.Write(&b, le, uint64(len(f.tensors)))
	binary.Write(&b, le, uint64(len(f.kvs)))
	for _, kv := range f.kvs {
		putString(&b, kv.Key)
		binary.Write(&b, le, uint32(kv.Value.Type))
		putValue(&b, kv.Value)
	}
	align := f.alignment
	if align == 0 {
		align = DefaultAlignment
	}
	var off uint64
	for _, t := range f.tensors {
		putString(&b, t.name)
		binary.Write(&b, le, uint32(len(t.dims)))
		for _, d := range t.dims {
			binary.Write(&b, le, d)
		}
		binary.Write(&b, le, uint32(t.typ))
		o := off
		if t.offset != nil {
			o = *t.offset
		}
		binary.Write(&b, le, o)
		off += uint64(alignUp(int64(len(t.data)), align))
	}
	for int64(b.Len())%align != 0 {
		b.WriteByte(0)
	}
	for _, t := range f.tensors {
		b.Write(t.data)
		for int64(b.Len())%align != 0 {
			b.WriteByte(0)
		}
	}
	return b.Bytes()
}

func f32Bytes(v ...float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func parseBytes(t testing.TB, b []byte) (*File, error) {
	t.Helper()
	return Parse(bytes.NewReader(b), int64(len(b)), "test.gguf")
}
