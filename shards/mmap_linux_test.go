package shards

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/synth"
)

// residentPages counts the pages of m in memory (mincore).
func residentPages(t *testing.T, m []byte) int {
	t.Helper()
	vec := make([]byte, (len(m)+pageSize-1)/pageSize)
	if err := mincore(m, vec); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

// oneLayerSplit splits a synthetic one-layer checkpoint of the given hidden size (intermediate 4×, vocab 256)
// into a temporary folder, raw; the set is closed at the end of the test.
func oneLayerSplit(t *testing.T, hidden int, dt checkpoint.DType) *Set {
	t.Helper()
	dir := t.TempDir()
	shape := synth.Shape{HiddenSize: hidden, IntermediateSize: 4 * hidden, NumLayers: 1, NumHeads: 8, NumKVHeads: 4,
		VocabSize: 256, BOSTokenID: 1, EOSTokenID: 2}
	if err := synth.Write(dir, synth.Options{Shape: shape, DType: dt, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	ck, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	s := split(t, ck, t.TempDir(), Raw)
	t.Cleanup(func() { s.Close() })
	return s
}

// TestKeptMappingFaultsInEvictedPages: pages of a kept mapping that the kernel evicted are read back by the
// next Map (the prefetch stage), not left to compute's page faults.
func TestKeptMappingFaultsInEvictedPages(t *testing.T) {
	// A layer of 33 MB: the kernel's readahead around the table at the file's end (read_ahead_kb, 8 MB on the
	// CI VM) must not cover its start.
	s := oneLayerSplit(t, 1024, checkpoint.BF16)
	s.SetKeepMapped(true)
	s.SetVerify(VerifyOnce)
	u := s.mustUnit(t, "layer.0")
	if _, err := s.Map(context.Background(), u.Name, NewBuffer(0)); err != nil {
		t.Fatal(err)
	}
	s.mapsMu.Lock()
	m := s.kept[u.Name].data
	s.mapsMu.Unlock()
	const madvPageout = 21 // MADV_PAGEOUT (Linux 5.4)
	if err := syscall.Madvise(m, madvPageout); err != nil {
		t.Skipf("MADV_PAGEOUT: %v", err)
	}
	total := len(m) / pageSize
	if n := residentPages(t, m); n > total/2 {
		t.Skipf("the kernel kept %d of %d pages after MADV_PAGEOUT", n, total)
	}
	if _, err := s.Map(context.Background(), u.Name, NewBuffer(0)); err != nil {
		t.Fatal(err)
	}
	if n := residentPages(t, m); n != total {
		t.Errorf("%d of %d pages resident after Map reused the kept mapping", n, total)
	}
}

// TestMapTruncatedWhileMappedIsAnError: a shard file truncated while Map reads its mapping (its table, the
// checksums on the workers) gives a *MappingFault error naming the file, not a crash of the program.
func TestMapTruncatedWhileMappedIsAnError(t *testing.T) {
	s := oneLayerSplit(t, 256, checkpoint.F32)
	u := s.mustUnit(t, "layer.0")
	defer func(h func(*os.File, int64) ([]byte, error)) { testHookMapFile = h }(testHookMapFile)
	testHookMapFile = func(f *os.File, size int64) ([]byte, error) {
		m, err := mapFile(f, size)
		if err == nil {
			err = os.Truncate(f.Name(), 4096) // under the mapping, before Map reads it
		}
		return m, err
	}
	buf := NewBuffer(0)
	defer buf.Release()
	_, err := s.Map(context.Background(), u.Name, buf)
	var f *MappingFault
	if !errors.As(err, &f) || !strings.Contains(err.Error(), u.File) {
		t.Fatalf("Map of a file truncated under its mapping: %v, want a *MappingFault naming %s", err, u.File)
	}
}
