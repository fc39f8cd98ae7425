package checkpoint

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// safetensorsFile assembles a file from header JSON and dataLen bytes of data.
func safetensorsFile(header string, dataLen int) []byte {
	b := make([]byte, 8, 8+len(header)+dataLen)
	binary.LittleEndian.PutUint64(b, uint64(len(header)))
	b = append(b, header...)
	return append(b, make([]byte, dataLen)...)
}

const goodHeader = `{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},"b":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]}}  `

func parse(b []byte) ([]TensorInfo, error) {
	return ParseSafetensors(bytes.NewReader(b), int64(len(b)), "x.safetensors")
}

func TestParseSafetensorsGood(t *testing.T) {
	ts, err := parse(safetensorsFile(goodHeader, 32))
	if err != nil {
		t.Fatal(err)
	}
	start := int64(8 + len(goodHeader))
	if len(ts) != 2 || ts[0].Name != "a" || ts[0].Offset != start || ts[0].Length != 24 || ts[1].Name != "b" ||
		ts[1].DType != BF16 || ts[1].Offset != start+24 || ts[1].Length != 8 {
		t.Fatalf("%+v", ts)
	}
}

func TestParseSafetensorsCorrupt(t *testing.T) {
	good := safetensorsFile(goodHeader, 32)
	flip := func(i int, mask byte) []byte {
		b := bytes.Clone(good)
		b[i] ^= mask
		return b
	}
	hdr := func(h string) []byte { return safetensorsFile(h, 32) }
	cases := []struct {
		name string
		file []byte
		want string
	}{
		{"empty", nil, "too short for a header"},
		{"truncated data", good[:len(good)-1], `tensor "b": data_offsets [24, 32] outside the data section (31 bytes)`},
		{"truncated header", good[:20], "does not fit the file"},
		{"length prefix flipped", flip(5, 0x10), "does not fit the file"},
		{"brace flipped", flip(8, 0x01), "malformed header JSON"},
		{"shape digit flipped", flip(8+strings.Index(goodHeader, "[2,3]")+1, 0x01), `tensor "a": shape [3 3] of F32 needs 36 bytes, data_offsets span 24`},
		{"dtype", hdr(`{"a":{"dtype":"I8","shape":[1],"data_offsets":[0,1]}}`), `unsupported dtype "I8"`},
		{"negative dim", hdr(`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`), "negative dimension"},
		{"huge shape", hdr(`{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}`), "too large"},
		{"offsets count", hdr(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}}`), "data_offsets must have 2 entries"},
		{"reversed offsets", hdr(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}}`), "outside the data section"},
		{"overlap", hdr(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`), "overlap"},
		{"not an object", hdr(`[1,2]`), "malformed header JSON"},
		{"entry not an object", hdr(`{"a":3}`), `tensor "a": malformed entry`},
		{"trailing garbage", hdr(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}} x`), "after the header JSON"},
	}
	for _, c := range cases {
		_, err := parse(c.file)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "x.safetensors") {
			t.Errorf("%s: got %v, want an error naming the file and containing %q", c.name, err, c.want)
		}
	}
}

func TestOpenCorruptCheckpoint(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"architectures":["LlamaForCausalLM"],"hidden_size":8,
		"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":2,"vocab_size":4,"max_position_embeddings":16}`), 0o644)
	file := filepath.Join(dir, "model.safetensors")
	os.WriteFile(file, safetensorsFile(goodHeader, 32)[:40], 0o644)
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), file) {
		t.Fatalf("truncated weights: %v", err)
	}
	os.WriteFile(filepath.Join(dir, IndexFile), []byte(`{"weight_map":{"a":"../evil.safetensors"}}`), 0o644)
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "plain file name") {
		t.Fatalf("index escaping the folder: %v", err)
	}
	os.WriteFile(filepath.Join(dir, IndexFile), []byte(`{"weight_map":`), 0o644)
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "malformed JSON") {
		t.Fatalf("truncated index: %v", err)
	}
}

// FuzzSafetensorsHeader: any bytes, as a whole file or as header JSON behind a correct length prefix, parse
// without panicking, and whatever is accepted lies inside the file without overlaps and with consistent sizes.
func FuzzSafetensorsHeader(f *testing.F) {
	f.Add([]byte(goodHeader), uint16(32))
	f.Add([]byte(`{"a":{"dtype":"F16","shape":[],"data_offsets":[0,2]}}`), uint16(2))
	f.Add([]byte(`{"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`), uint16(4))
	f.Add([]byte(`{}`), uint16(0))
	f.Fuzz(func(t *testing.T, header []byte, dataLen uint16) {
		parse(header) // the raw bytes as a whole file
		file := safetensorsFile(string(header), int(dataLen))
		ts, err := parse(file)
		if err != nil {
			return
		}
		dataStart := int64(8 + len(header))
		end := dataStart
		for _, ti := range ts {
			if ti.Offset < end || ti.Offset+ti.Length > int64(len(file)) {
				t.Fatalf("tensor %q at [%d, +%d) overlaps or leaves the %d-byte file", ti.Name, ti.Offset, ti.Length, len(file))
			}
			if ti.NumElements()*int64(ti.DType.Size()) != ti.Length {
				t.Fatalf("tensor %q: shape %v of %s with %d bytes", ti.Name, ti.Shape, ti.DType, ti.Length)
			}
			end = ti.Offset + ti.Length
		}
	})
}
