package shards

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/synth"
)

// seedSplits splits a very small synthetic model with each encoding into folders named after it.
func seedSplits(f *testing.F, encs ...Encoding) map[Encoding]*Set {
	dir := f.TempDir()
	shape := synth.Shape{HiddenSize: 16, IntermediateSize: 24, NumLayers: 1, NumHeads: 2, VocabSize: 40}
	if err := synth.Write(dir, synth.Options{Shape: shape, DType: checkpoint.BF16, Seed: 1}); err != nil {
		f.Fatal(err)
	}
	ck, err := checkpoint.Open(dir)
	if err != nil {
		f.Fatal(err)
	}
	sets := map[Encoding]*Set{}
	for _, enc := range encs {
		if sets[enc], err = Split(context.Background(), ck, SplitOptions{Out: filepath.Join(dir, string(enc)), Encoding: enc, DiskRate: -1}); err != nil {
			f.Fatal(err)
		}
	}
	return sets
}

// seedShards returns some shard files of seedSplits as seeds.
func seedShards(f *testing.F) [][]byte {
	var seeds [][]byte
	for _, enc := range []Encoding{Raw, Zstd, ShuffleZstd, Planes} {
		out := seedSplits(f, enc)[enc].Dir
		for _, unit := range []string{"layer.0", "norm"} {
			b, err := os.ReadFile(filepath.Join(out, unit+".shard"))
			if err != nil {
				f.Fatal(err)
			}
			seeds = append(seeds, b)
		}
	}
	return seeds
}

// splitShard separates a shard file into its data section (after the prefix) and header JSON.
func splitShard(b []byte) (data, js []byte) {
	hlen := int(binary.LittleEndian.Uint32(b[len(b)-trailerSize:]))
	hdrStart := len(b) - trailerSize - hlen
	return b[prefixSize:hdrStart], b[hdrStart : len(b)-trailerSize]
}

// assembleShard builds a shard file from a data section and header JSON with a correct header checksum, so
// the fuzzer reaches the header validation and the decoders instead of stopping at the checksum. The data is
// zero-padded to the header's file_size when that is reachable.
func assembleShard(data, js []byte) []byte {
	size := prefixSize + len(data) + len(js) + trailerSize
	var fs struct {
		FileSize int64 `json:"file_size"`
	}
	if json.Unmarshal(js, &fs) == nil && fs.FileSize > int64(size) && fs.FileSize < int64(size)+1<<20 {
		size = int(fs.FileSize)
	}
	b := make([]byte, size)
	copy(b, prefix())
	copy(b[prefixSize:], data)
	copy(b[size-trailerSize-len(js):], js)
	tr := b[size-trailerSize:]
	binary.LittleEndian.PutUint32(tr[0:], uint32(len(js)))
	binary.LittleEndian.PutUint32(tr[4:], crc32c(js))
	binary.LittleEndian.PutUint32(tr[8:], version)
	copy(tr[16:], magic)
	return b
}

func addSeeds(f *testing.F) {
	for _, b := range seedShards(f) {
		data, js := splitShard(b)
		f.Add(data, js)
		f.Add(data[:len(data)/2], js)
	}
	f.Add([]byte{}, []byte(`{"unit":"norm","encoding":"raw","file_size":0,"tensors":[]}`))
	f.Add([]byte{}, []byte(`null`))
}

// FuzzShardHeader: any bytes, as a whole file or as a header with a valid checksum, parse without panicking,
// and an accepted header only describes byte ranges inside the file.
func FuzzShardHeader(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, data, js []byte) {
		parseShard(append(append([]byte{}, data...), js...), "raw.shard")
		b := assembleShard(data, js)
		h, err := parseShard(b, "fuzz.shard")
		if err != nil {
			return
		}
		if h.FileSize != int64(len(b)) || len(h.Tensors) == 0 {
			t.Fatalf("accepted header with file size %d for %d bytes, %d tensors", h.FileSize, len(b), len(h.Tensors))
		}
		end := int64(prefixSize)
		for _, tn := range h.Tensors {
			if tn.Offset < end || tn.Offset%dataAlign != 0 || tn.Offset+tn.EncodedLength > int64(len(b)) {
				t.Fatalf("accepted tensor %q at [%d, +%d) in %d bytes", tn.Name, tn.Offset, tn.EncodedLength, len(b))
			}
			end = tn.Offset + tn.EncodedLength
		}
	})
}

// FuzzShardLoad: decoding and verifying any accepted shard never panics, and whatever it returns has the
// declared length and checksum.
func FuzzShardLoad(f *testing.F) {
	addSeeds(f)
	dec, err := newDecoder()
	if err != nil {
		f.Fatal(err)
	}
	decoder := func() (*zstd.Decoder, error) { return dec, nil }
	f.Fuzz(func(t *testing.T, data, js []byte) {
		b := assembleShard(data, js)
		h, err := parseShard(b, "fuzz.shard")
		if err != nil {
			return
		}
		n := decodeSize(h.Tensors)
		if n > 1<<20 {
			return // a valid header may declare huge tensors; their bytes cannot be in a small input anyway
		}
		ts, err := decodeTensors(context.Background(), "fuzz.shard", b, h, make([]byte, n), decoder)
		if err != nil {
			return
		}
		for _, ti := range h.Tensors {
			got := ts[ti.Name]
			if int64(len(got.Data)) != ti.Length || crc32c(got.Data) != ti.CRC32C {
				t.Fatalf("tensor %q: %d bytes returned, want %d with a matching checksum", ti.Name, len(got.Data), ti.Length)
			}
		}
	})
}

// FuzzManifest: any bytes as manifest.parquet parse without panicking (or a damaged file is an error), and an
// accepted manifest describes units whose tensors lie inside their files.
func FuzzManifest(f *testing.F) {
	for _, s := range seedSplits(f, Raw, Zstd) {
		out := s.Dir
		b, err := os.ReadFile(filepath.Join(out, ManifestFile))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		if err := writeManifest(out, s.Units(), nil); err != nil {
			f.Fatal(err)
		}
		if b, err = os.ReadFile(filepath.Join(out, ManifestFile)); err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	// A mixture of experts' manifest: its expert column set for the routed experts' tensors.
	ms, err := Split(context.Background(), moeCheckpoint(f), SplitOptions{Out: f.TempDir(), DiskRate: -1})
	if err != nil {
		f.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(ms.Dir, ManifestFile))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte("PAR1PAR1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		units, _, err := parseManifest(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		if len(units) == 0 {
			t.Fatal("accepted a manifest without units")
		}
		for _, u := range units {
			if err := checkExpertLayout(u); err != nil {
				t.Fatalf("accepted a manifest whose experts' tensors do not lie together: %v", err)
			}
			for _, tn := range u.Tensors {
				if tn.Offset < 0 || tn.EncodedLength < 0 || tn.Offset+tn.EncodedLength > u.FileSize {
					t.Fatalf("unit %s: tensor %q at [%d, +%d) outside its %d-byte file", u.Name, tn.Name, tn.Offset, tn.EncodedLength, u.FileSize)
				}
			}
		}
	})
}
