// Package gguf reads GGUF files (the format of llama.cpp, ollama and LM Studio), versions 2 and 3,
// little-endian: the header, every metadata key/value (all value types, arrays included), the tensor table and
// the data section. The bytes are untrusted: every count, length, offset, size and the alignment is checked
// against the file size before it is used, so a lying header gives an error naming the field or tensor, never a
// panic or an allocation larger than the file.
//
// Beyond the container, the package maps a model to layerstream's terms: the architecture and hyper-parameters
// to a checkpoint.Config (config.go), tensor names to Hugging Face names and llama.cpp's Q/K row order back to
// Hugging Face's (names.go), and the tokenizer.ggml.* metadata to a tokenizer.json (tokenizer.go).
package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"

	"github.com/layerstream/layerstream/quant"
)

// Magic is the first four bytes of a GGUF file.
const Magic = "GGUF"

// DefaultAlignment is the data alignment when general.alignment is absent.
const DefaultAlignment = 32

// MaxDims is the largest number of dimensions a GGUF tensor may have (GGML_MAX_DIMS).
const MaxDims = 4

// ValueType is the type of a metadata value (gguf_type).
type ValueType uint32

// The metadata value types.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

var valueTypeNames = [...]string{"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool",
	"string", "array", "uint64", "int64", "float64"}

func (t ValueType) String() string {
	if int(t) < len(valueTypeNames) {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// size is the encoded size of one scalar value; strings and arrays have none (0).
func (t ValueType) size() int64 {
	switch t {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64:
		return 8
	}
	return 0
}

// Value is one metadata value. Scalars are held as uint8, int8, uint16, int16, uint32, int32, float32, bool,
// string, uint64, int64 or float64; arrays as a slice of their element type ([]uint32, []string, …); an array of
// arrays as []Value.
type Value struct {
	Type ValueType
	// Elem is the element type of an array.
	Elem ValueType
	V    any
}

// KV is one metadata entry.
type KV struct {
	Key   string
	Value Value
}

// TensorInfo describes one tensor of the file.
type TensorInfo struct {
	Name string
	// Dims in GGUF order: Dims[0] is the fastest-varying dimension (a row's length for a matrix).
	Dims []int64
	Type quant.Type
	// Offset is the absolute file offset of the data, Size its byte count.
	Offset, Size int64
	// Path is the file holding the data: the File's own, or for a model split over several files (OpenModel)
	// the part's.
	Path string
}

// Elements is the product of the dimensions.
func (t TensorInfo) Elements() int64 {
	n := int64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// Shape is the shape in row-major (Hugging Face / safetensors) order: Dims reversed.
func (t TensorInfo) Shape() []int64 {
	s := slices.Clone(t.Dims)
	slices.Reverse(s)
	return s
}

// File is a parsed GGUF file.
type File struct {
	Path    string
	Version uint32
	// KVs in file order; Alignment and DataOffset as validated.
	KVs        []KV
	Tensors    []TensorInfo
	Alignment  int64
	DataOffset int64
	Size       int64
	// Parts are the files of a model split over several (OpenModel), the first being Path; nil from Open.
	Parts []string

	kv     map[string]int
	byName map[string]int
}

// Open parses the GGUF file at path. The tensor data is not read.
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	g, err := Parse(f, st.Size(), path)
	if err != nil {
		return nil, err
	}
	return g, nil
}

// Parse parses a GGUF file of the given size from r. name is used in errors and recorded as Path.
func Parse(r io.ReaderAt, size int64, name string) (*File, error) {
	p := &parser{r: bufio.NewReaderSize(io.NewSectionReader(r, 0, size), 1<<20), size: size, name: name}
	g, err := p.file()
	if err != nil {
		return nil, fmt.Errorf("gguf %s: %w", name, err)
	}
	return g, nil
}

// errTruncated is wrapped by errors about data running past the end of the file.
var errTruncated = errors.New("runs past the end of the file (truncated or not a GGUF file?)")

type parser struct {
	r    *bufio.Reader
	off  int64
	size int64
	name string
	buf  [8]byte
}

// need checks that n more bytes lie inside the file, before anything of that size is allocated or read.
func (p *parser) need(n int64, what string) error {
	if n < 0 || n > p.size-p.off {
		return fmt.Errorf("%s (%d bytes at offset %d) %w", what, n, p.off, errTruncated)
	}
	return nil
}

func (p *parser) read(b []byte, what string) error {
	if err := p.need(int64(len(b)), what); err != nil {
		return err
	}
	if _, err := io.ReadFull(p.r, b); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("%s at offset %d %w", what, p.off, errTruncated)
		}
		return fmt.Errorf("%s at offset %d: %w", what, p.off, err)
	}
	p.off += int64(len(b))
	return nil
}

func (p *parser) u32(what string) (uint32, error) {
	if err := p.read(p.buf[:4], what); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(p.buf[:4]), nil
}

func (p *parser) u64(what string) (uint64, error) {
	if err := p.read(p.buf[:8], what); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(p.buf[:8]), nil
}

// count reads a uint64 element count and checks that count elements of at least minSize bytes each fit in the
// rest of the file.
func (p *parser) count(what string, minSize int64) (int64, error) {
	n, err := p.u64(what)
	if err != nil {
		return 0, err
	}
	if n > uint64(math.MaxInt64/minSize) || int64(n)*minSize > p.size-p.off {
		return 0, fmt.Errorf("%s %d cannot fit in the %d bytes left in the file (corrupted header?)", what, n, p.size-p.off)
	}
	return int64(n), nil
}

func (p *parser) str(what string) (string, error) {
	n, err := p.count(what+" length", 1)
	if err != nil {
		return "", err
	}
	b := make([]byte, n)
	if err := p.read(b, what); err != nil {
		return "", err
	}
	return string(b), nil
}

// headerSize is the fixed start of a GGUF file: magic, version, tensor count and metadata count.
const headerSize = 4 + 4 + 8 + 8

func (p *parser) file() (*File, error) {
	if p.size == 0 {
		return nil, errors.New("the file is empty (0 bytes): not a GGUF file")
	}
	if p.size >= int64(len(Magic)) {
		var m [4]byte
		if err := p.read(m[:], "magic"); err != nil {
			return nil, err
		}
		if string(m[:]) != Magic {
			return nil, fmt.Errorf("bad magic %q: not a GGUF file", m[:])
		}
	}
	if p.size < headerSize {
		return nil, fmt.Errorf("the file is %d bytes, too short for a GGUF header (%d bytes: magic, version, tensor and metadata counts; truncated?)", p.size, headerSize)
	}
	v, err := p.u32("version")
	if err != nil {
		return nil, err
	}
	switch {
	case v == 2 || v == 3:
	case v == 1:
		return nil, errors.New("GGUF version 1 is not supported (versions 2 and 3 are; convert the file again with a current llama.cpp)")
	case v&0xffff == 0 && (v>>24 == 2 || v>>24 == 3):
		return nil, errors.New("big-endian GGUF files are not supported")
	default:
		return nil, fmt.Errorf("GGUF version %d is not supported (versions 2 and 3 are)", v)
	}
	g := &File{Path: p.name, Version: v, Size: p.size, Alignment: DefaultAlignment, kv: map[string]int{}, byName: map[string]int{}}
	// A tensor info takes at least 8 (name length) + 4 (dims) + 4 (type) + 8 (offset) bytes; a KV at least
	// 8 (key length) + 4 (type) + 1.
	nt, err := p.count("tensor count", 24)
	if err != nil {
		return nil, err
	}
	nkv, err := p.count("metadata key/value count", 13)
	if err != nil {
		return nil, err
	}
	g.KVs = make([]KV, 0, nkv)
	for i := range nkv {
		key, err := p.str(fmt.Sprintf("metadata key %d", i))
		if err != nil {
			return nil, err
		}
		if _, dup := g.kv[key]; dup {
			return nil, fmt.Errorf("metadata key %q appears twice", key)
		}
		val, err := p.value(key)
		if err != nil {
			return nil, err
		}
		g.kv[key] = len(g.KVs)
		g.KVs = append(g.KVs, KV{Key: key, Value: val})
	}
	if i, ok := g.kv["general.alignment"]; ok {
		a, ok := g.KVs[i].Value.V.(uint32)
		if !ok {
			return nil, fmt.Errorf("general.alignment is a %s, want uint32", g.KVs[i].Value.Type)
		}
		if a == 0 || a&(a-1) != 0 {
			return nil, fmt.Errorf("general.alignment %d is not a power of two", a)
		}
		g.Alignment = int64(a)
	}
	g.Tensors = make([]TensorInfo, 0, nt)
	for i := range nt {
		t, err := p.tensorInfo(i)
		if err != nil {
			return nil, err
		}
		if _, dup := g.byName[t.Name]; dup {
			return nil, fmt.Errorf("tensor %q appears twice", t.Name)
		}
		g.byName[t.Name] = len(g.Tensors)
		g.Tensors = append(g.Tensors, t)
	}
	g.DataOffset = alignUp(p.off, g.Alignment)
	if g.DataOffset > p.size {
		return nil, fmt.Errorf("data section at offset %d %w", g.DataOffset, errTruncated)
	}
	if err := g.placeTensors(); err != nil {
		return nil, err
	}
	return g, nil
}

func alignUp(n, a int64) int64 { return (n + a - 1) / a * a }

// value reads a typed value of key.
func (p *parser) value(key string) (Value, error) {
	t, err := p.u32(fmt.Sprintf("type of %q", key))
	if err != nil {
		return Value{}, err
	}
	vt := ValueType(t)
	if vt != TypeArray {
		v, err := p.scalar(vt, key)
		return Value{Type: vt, V: v}, err
	}
	return p.array(key, 0)
}

// maxNesting bounds arrays of arrays.
const maxNesting = 4

func (p *parser) array(key string, depth int) (Value, error) {
	if depth >= maxNesting {
		return Value{}, fmt.Errorf("metadata %q: arrays nested more than %d deep", key, maxNesting)
	}
	et, err := p.u32(fmt.Sprintf("array element type of %q", key))
	if err != nil {
		return Value{}, err
	}
	elem := ValueType(et)
	minSize := elem.size()
	switch elem {
	case TypeString, TypeArray:
		minSize = 8 // a length or an element type and a count
	case TypeBool, TypeUint8, TypeInt8, TypeUint16, TypeInt16, TypeUint32, TypeInt32, TypeFloat32, TypeUint64,
		TypeInt64, TypeFloat64:
	default:
		return Value{}, fmt.Errorf("metadata %q: array of unknown value type %d", key, et)
	}
	n, err := p.count(fmt.Sprintf("array length of %q", key), minSize)
	if err != nil {
		return Value{}, err
	}
	v := Value{Type: TypeArray, Elem: elem}
	if sz := elem.size(); sz > 0 {
		raw := make([]byte, n*sz)
		if err := p.read(raw, fmt.Sprintf("array %q", key)); err != nil {
			return Value{}, err
		}
		v.V, err = decodeArray(elem, raw, n, key)
		return v, err
	}
	switch elem {
	case TypeString:
		s := make([]string, n)
		for i := range s {
			if s[i], err = p.str(fmt.Sprintf("%s[%d]", key, i)); err != nil {
				return Value{}, err
			}
		}
		v.V = s
	case TypeArray:
		a := make([]Value, n)
		for i := range a {
			if a[i], err = p.array(fmt.Sprintf("%s[%d]", key, i), depth+1); err != nil {
				return Value{}, err
			}
		}
		v.V = a
	}
	return v, nil
}

// decodeArray turns n little-endian elements of type t into a typed slice.
func decodeArray(t ValueType, raw []byte, n int64, key string) (any, error) {
	le := binary.LittleEndian
	switch t {
	case TypeUint8:
		return raw, nil
	case TypeInt8:
		s := make([]int8, n)
		for i := range s {
			s[i] = int8(raw[i])
		}
		return s, nil
	case TypeBool:
		s := make([]bool, n)
		for i := range s {
			if raw[i] > 1 {
				return nil, fmt.Errorf("metadata %q[%d]: bool byte %d is neither 0 nor 1", key, i, raw[i])
			}
			s[i] = raw[i] == 1
		}
		return s, nil
	case TypeUint16:
		s := make([]uint16, n)
		for i := range s {
			s[i] = le.Uint16(raw[2*i:])
		}
		return s, nil
	case TypeInt16:
		s := make([]int16, n)
		for i := range s {
			s[i] = int16(le.Uint16(raw[2*i:]))
		}
		return s, nil
	case TypeUint32:
		s := make([]uint32, n)
		for i := range s {
			s[i] = le.Uint32(raw[4*i:])
		}
		return s, nil
	case TypeInt32:
		s := make([]int32, n)
		for i := range s {
			s[i] = int32(le.Uint32(raw[4*i:]))
		}
		return s, nil
	case TypeFloat32:
		s := make([]float32, n)
		for i := range s {
			s[i] = math.Float32frombits(le.Uint32(raw[4*i:]))
		}
		return s, nil
	case TypeUint64:
		s := make([]uint64, n)
		for i := range s {
			s[i] = le.Uint64(raw[8*i:])
		}
		return s, nil
	case TypeInt64:
		s := make([]int64, n)
		for i := range s {
			s[i] = int64(le.Uint64(raw[8*i:]))
		}
		return s, nil
	case TypeFloat64:
		s := make([]float64, n)
		for i := range s {
			s[i] = math.Float64frombits(le.Uint64(raw[8*i:]))
		}
		return s, nil
	}
	return nil, fmt.Errorf("metadata %q: array of %s", key, t)
}

func (p *parser) scalar(t ValueType, key string) (any, error) {
	if t == TypeString {
		return p.str(fmt.Sprintf("value of %q", key))
	}
	sz := t.size()
	if sz == 0 {
		return nil, fmt.Errorf("metadata %q: unknown value type %d", key, uint32(t))
	}
	var b [8]byte
	if err := p.read(b[:sz], fmt.Sprintf("value of %q", key)); err != nil {
		return nil, err
	}
	v, err := decodeArray(t, b[:sz], 1, key)
	if err != nil {
		return nil, err
	}
	switch s := v.(type) {
	case []byte:
		return s[0], nil
	case []int8:
		return s[0], nil
	case []bool:
		return s[0], nil
	case []uint16:
		return s[0], nil
	case []int16:
		return s[0], nil
	case []uint32:
		return s[0], nil
	case []int32:
		return s[0], nil
	case []float32:
		return s[0], nil
	case []uint64:
		return s[0], nil
	case []int64:
		return s[0], nil
	case []float64:
		return s[0], nil
	}
	return nil, fmt.Errorf("metadata %q: value of %s", key, t)
}

// tensorInfo reads tensor table entry i; the offset is relative to the data section until placeTensors.
func (p *parser) tensorInfo(i int64) (TensorInfo, error) {
	name, err := p.str(fmt.Sprintf("name of tensor %d", i))
	if err != nil {
		return TensorInfo{}, err
	}
	if name == "" {
		return TensorInfo{}, fmt.Errorf("tensor %d has an empty name", i)
	}
	nd, err := p.u32(fmt.Sprintf("dimension count of tensor %q", name))
	if err != nil {
		return TensorInfo{}, err
	}
	if nd == 0 || nd > MaxDims {
		return TensorInfo{}, fmt.Errorf("tensor %q has %d dimensions (1 to %d allowed)", name, nd, MaxDims)
	}
	t := TensorInfo{Name: name, Dims: make([]int64, nd)}
	elems := int64(1)
	for j := range t.Dims {
		d, err := p.u64(fmt.Sprintf("dimension %d of tensor %q", j, name))
		if err != nil {
			return TensorInfo{}, err
		}
		if d == 0 || d > math.MaxInt64 || elems > math.MaxInt64/int64(d) {
			return TensorInfo{}, fmt.Errorf("tensor %q: dimension %d is %d (must be positive, product below 2^63)", name, j, d)
		}
		t.Dims[j] = int64(d)
		elems *= int64(d)
	}
	typ, err := p.u32(fmt.Sprintf("type of tensor %q", name))
	if err != nil {
		return TensorInfo{}, err
	}
	t.Type = quant.Type(typ)
	f, ok := t.Type.Format()
	if !ok {
		return TensorInfo{}, fmt.Errorf("tensor %q: %s is not supported (supported: %s)", name, t.Type, quant.SupportedNames())
	}
	if t.Dims[0]%int64(f.BlockElems) != 0 {
		return TensorInfo{}, fmt.Errorf("tensor %q: rows of %d elements are not a whole number of %s blocks (%d elements)", name, t.Dims[0], t.Type, f.BlockElems)
	}
	blocks := elems / int64(f.BlockElems)
	if blocks > math.MaxInt64/int64(f.BlockBytes) {
		return TensorInfo{}, fmt.Errorf("tensor %q: %d elements is too large", name, elems)
	}
	t.Size = blocks * int64(f.BlockBytes)
	off, err := p.u64(fmt.Sprintf("offset of tensor %q", name))
	if err != nil {
		return TensorInfo{}, err
	}
	if off > math.MaxInt64 {
		return TensorInfo{}, fmt.Errorf("tensor %q: offset %d is out of range", name, off)
	}
	t.Offset = int64(off)
	return t, nil
}

// placeTensors makes tensor offsets absolute and checks each is aligned, inside the file and overlapping none.
func (g *File) placeTensors() error {
	dataLen := g.Size - g.DataOffset
	for i := range g.Tensors {
		t := &g.Tensors[i]
		if t.Offset%g.Alignment != 0 {
			return fmt.Errorf("tensor %q: offset %d is not a multiple of the alignment %d", t.Name, t.Offset, g.Alignment)
		}
		if t.Offset > dataLen || t.Size > dataLen-t.Offset {
			return fmt.Errorf("tensor %q: %d bytes at data offset %d lie outside the %d-byte data section (truncated file?)", t.Name, t.Size, t.Offset, dataLen)
		}
		t.Offset += g.DataOffset
		t.Path = g.Path
	}
	order := make([]int, len(g.Tensors))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		ta, tb := g.Tensors[a], g.Tensors[b]
		if ta.Offset != tb.Offset {
			if ta.Offset < tb.Offset {
				return -1
			}
			return 1
		}
		return 0
	})
	for k := 1; k < len(order); k++ {
		prev, cur := g.Tensors[order[k-1]], g.Tensors[order[k]]
		if cur.Offset < prev.Offset+prev.Size {
			return fmt.Errorf("tensors %q and %q overlap", prev.Name, cur.Name)
		}
	}
	return nil
}

// Tensor returns the named tensor.
func (g *File) Tensor(name string) (TensorInfo, bool) {
	i, ok := g.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	return g.Tensors[i], true
}

// Get returns the value of a metadata key.
func (g *File) Get(key string) (Value, bool) {
	i, ok := g.kv[key]
	if !ok {
		return Value{}, false
	}
	return g.KVs[i].Value, true
}

// TensorFloat32s reads a small F32 tensor's values (rotary factors and the like, which change the configuration
// rather than being weights), at most max of them.
func (g *File) TensorFloat32s(name string, max int64) ([]float32, error) {
	t, ok := g.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("no tensor %q", name)
	}
	if t.Type != quant.F32 {
		return nil, fmt.Errorf("tensor %q is %s, want F32", name, t.Type)
	}
	n := t.Elements()
	if n > max || t.Size != 4*n {
		return nil, fmt.Errorf("tensor %q has %d elements (%d bytes), want at most %d F32 values", name, n, t.Size, max)
	}
	f, err := os.Open(t.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, t.Size)
	if _, err := f.ReadAt(b, t.Offset); err != nil {
		return nil, fmt.Errorf("tensor %q: %w", name, err)
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v, nil
}
