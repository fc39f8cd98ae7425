package reference

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// safetensors builds a file from a header and data.
func safetensors(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	return append(append(b, header...), data...)
}

func TestLoadTransformers(t *testing.T) {
	data := binary.LittleEndian.AppendUint64(nil, 7)
	data = binary.LittleEndian.AppendUint64(data, 9)
	for _, v := range []float32{1, 2, 3, 4, 5, 6} {
		data = binary.LittleEndian.AppendUint32(data, math.Float32bits(v))
	}
	hdr := `{"input_ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},"logits":{"dtype":"F32","shape":[2,3],"data_offsets":[16,40]}}`
	path := filepath.Join(t.TempDir(), TransformersFile)
	os.WriteFile(path, safetensors(hdr, data), 0o644)
	r, err := LoadTransformers(path)
	if err != nil {
		t.Fatal(err)
	}
	if r.Vocab != 3 || len(r.InputIDs) != 2 || r.InputIDs[1] != 9 || r.Row(1)[2] != 6 || r.GreedyIDs != nil {
		t.Fatalf("%+v", r)
	}
	for _, bad := range []string{
		`{"input_ids":{"dtype":"I64","shape":[3],"data_offsets":[0,16]}}`,
		`{"logits":{"dtype":"F32","shape":[2,3],"data_offsets":[16,40]}}`,
		`{"input_ids":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"logits":{"dtype":"F32","shape":[2,3],"data_offsets":[16,40]}}`,
		`{"input_ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},"logits":{"dtype":"F32","shape":[3,2],"data_offsets":[16,40]},"x":{"dtype":"I64","shape":[1],"data_offsets":[0,99]}}`,
	} {
		os.WriteFile(path, safetensors(bad, data), 0o644)
		if _, err := LoadTransformers(path); err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("accepted %s (%v)", bad, err)
		}
	}
}

// FuzzTransformersFile: any bytes parse without panicking, and every tensor accepted holds as many values as
// its shape says.
func FuzzTransformersFile(f *testing.F) {
	f.Add(safetensors(`{"a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}}`, make([]byte, 8)))
	f.Add(safetensors(`{"b":{"dtype":"F32","shape":[2,1],"data_offsets":[0,8]},"__metadata__":{}}`, make([]byte, 8)))
	f.Add([]byte{255, 255, 255, 255, 255, 255, 255, 255})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseTensors(b, "fuzz")
		if err != nil {
			return
		}
		for name, tn := range m {
			n := 1
			for _, d := range tn.Shape {
				n *= d
			}
			if len(tn.F32)+len(tn.I64) != n {
				t.Fatalf("tensor %q: %d values for shape %v", name, len(tn.F32)+len(tn.I64), tn.Shape)
			}
		}
	})
}
