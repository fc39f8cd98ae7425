package shards

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/internal/hffixture"
)

// moeCheckpoint opens the qwen3_moe fixture: 8 routed experts per layer.
func moeCheckpoint(t testing.TB) *checkpoint.Checkpoint {
	t.Helper()
	ck, err := checkpoint.Open(hffixture.Checkpoint(t, "qwen3_moe", hffixture.V5))
	if err != nil {
		t.Fatal(err)
	}
	return ck
}

// TestExpertLayout: the split lays out a sparse layer's tensors of no expert first, then each expert's together in
// expert order, as the model binds them (model.WeightSpec.Expert); the manifest records the experts; LoadPart
// reads one expert (or the rest) with one read of its range, each tensor equal to the checkpoint's, raw or
// encoded.
func TestExpertLayout(t *testing.T) {
	ck := moeCheckpoint(t)
	experts := ck.Config.NumExperts
	for _, enc := range []Encoding{Raw, Zstd} {
		t.Run(string(enc), func(t *testing.T) {
			s := split(t, ck, t.TempDir(), enc)
			reopened, err := Open(s.Dir)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(s.Units(), reopened.Units(), func(a, b UnitInfo) bool {
				return slices.EqualFunc(a.Tensors, b.Tensors, func(x, y TensorInfo) bool { return x.Expert() == y.Expert() && x.Name == y.Name })
			}) {
				t.Fatal("the manifest does not round-trip the tensors' experts")
			}
			buf := NewBuffer(0)
			for _, u := range reopened.Units() {
				if u.Layer < 0 {
					if u.Experts() != 0 {
						t.Fatalf("unit %s lays out %d experts", u.Name, u.Experts())
					}
					continue
				}
				if u.Experts() != experts {
					t.Fatalf("unit %s lays out %d experts, want %d", u.Name, u.Experts(), experts)
				}
				for e := NoExpert; e < experts; e++ {
					checkPart(t, reopened, ck, u, e, buf)
				}
			}
		})
	}
}

// checkPart loads part e of unit u and compares it with the checkpoint.
func checkPart(t *testing.T, s *Set, ck *checkpoint.Checkpoint, u UnitInfo, e int, buf *Buffer) {
	t.Helper()
	part := u.Part(e)
	if len(part) == 0 {
		t.Fatalf("unit %s has no tensors of expert %d", u.Name, e)
	}
	for _, tn := range part {
		if want := fmtExpert(e); e >= 0 && !strings.Contains(tn.Name, want) {
			t.Fatalf("unit %s: tensor %q recorded as expert %d", u.Name, tn.Name, e)
		}
	}
	l, err := s.LoadPart(context.Background(), u.Name, e, buf)
	if err != nil {
		t.Fatal(err)
	}
	if l.ReadBytes != u.PartBytes(e) || l.ReadBytes >= u.FileSize || len(l.Tensors) != len(part) {
		t.Fatalf("unit %s expert %d: read %d bytes (part %d, file %d), %d tensors of %d", u.Name, e, l.ReadBytes, u.PartBytes(e), u.FileSize, len(l.Tensors), len(part))
	}
	for name, tn := range l.Tensors {
		src, _ := ck.Tensor(name)
		want := make([]byte, src.Length)
		if err := checkpoint.ReadTensorAt(src, want); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(tn.Data, want) {
			t.Fatalf("unit %s expert %d: tensor %q differs from the checkpoint", u.Name, e, name)
		}
	}
}

func fmtExpert(e int) string { return ".experts." + strconv.Itoa(e) + "." }

// TestExpertManifestUpgrade: a split whose manifest predates the expert column opens (no experts recorded), and
// Ensure records them without rewriting a shard whose tensors already lie by expert; a manifest whose experts'
// tensors are interleaved is refused by name.
func TestExpertManifestUpgrade(t *testing.T) {
	ck := moeCheckpoint(t)
	out := t.TempDir()
	s := split(t, ck, out, Raw)
	plain := make([]UnitInfo, len(s.Units()))
	for i, u := range s.Units() {
		u.Tensors = slices.Clone(u.Tensors)
		for k := range u.Tensors {
			u.Tensors[k] = u.Tensors[k].WithExpert(NoExpert)
		}
		plain[i] = u
	}
	if err := writeManifest(out, plain, s.Source()); err != nil {
		t.Fatal(err)
	}
	old, err := Open(out)
	if err != nil {
		t.Fatal(err)
	}
	if u, _ := old.Unit("layer.0"); u.Experts() != 0 {
		t.Fatalf("a manifest without the expert column records %d experts", u.Experts())
	}
	shard := filepath.Join(out, "layer.0.shard")
	before, err := os.Stat(shard)
	if err != nil {
		t.Fatal(err)
	}
	up, err := Ensure(context.Background(), ck, SplitOptions{Out: out})
	if err != nil {
		t.Fatal(err)
	}
	if u, _ := up.Unit("layer.0"); u.Experts() != ck.Config.NumExperts {
		t.Fatalf("after Ensure, layer.0 records %d experts, want %d", u.Experts(), ck.Config.NumExperts)
	}
	if after, err := os.Stat(shard); err != nil || !os.SameFile(before, after) {
		t.Fatalf("Ensure rewrote %s (%v)", shard, err)
	}
	bad := slices.Clone(up.Units())
	ts := slices.Clone(bad[1].Tensors)
	last := len(ts) - 1
	ts[last] = ts[last].WithExpert(0) // after expert 7's other tensors
	bad[1].Tensors = ts
	if err := writeManifest(out, bad, up.Source()); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(out); err == nil || !strings.Contains(err.Error(), "must lie together") || !strings.Contains(err.Error(), ts[last].Name) {
		t.Fatalf("interleaved experts: %v", err)
	}
}
