package shards

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/imatrix"
)

// TestSplitRequantizesOnNewEncoder: a q8 split whose source record names another quantizer (one made before the
// scale search) is not up to date: the units holding quantized tensors are quantized again and the record
// names this build's encoder; an unquantized split records none.
func TestSplitRequantizesOnNewEncoder(t *testing.T) {
	ck := tinyCheckpoint(t, checkpoint.BF16)
	out := filepath.Join(t.TempDir(), "s")
	s, err := Split(context.Background(), ck, SplitOptions{Out: out, Quantize: Q8})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Source().Quantizer, Q8.encoder(nil); got != want || want == "" {
		t.Fatalf("source record's quantizer %q, want %q", got, want)
	}
	layer := filepath.Join(out, "layer.0.shard")
	before, err := os.ReadFile(layer)
	if err != nil {
		t.Fatal(err)
	}
	// A record naming another encoder, and one naming none (splits made before the scale search): Verify cannot
	// compare their quantized tensors and says so once, instead of reporting each as damaged.
	src := *s.Source()
	for _, c := range []struct{ rec, want string }{{"q8: round-to-nearest", "which is not this build's"}, {"", "made by an older build"}} {
		src.Quantizer = c.rec
		if err := writeManifest(out, s.Units(), &src); err != nil {
			t.Fatal(err)
		}
		old, err := Open(out)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := old.Verify(context.Background(), ck)
		if err != nil || len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], c.want) {
			t.Errorf("verify of a split recording quantizer %q: %v %q, want one problem saying %q", c.rec, err, rep.Problems, c.want)
		}
	}
	src.Quantizer = "q8: round-to-nearest"
	if err := writeManifest(out, s.Units(), &src); err != nil {
		t.Fatal(err)
	}
	old, _ := os.Stat(layer)
	s, err = Split(context.Background(), ck, SplitOptions{Out: out, Quantize: Q8})
	if err != nil {
		t.Fatal(err)
	}
	if s.Source().Quantizer != Q8.encoder(nil) {
		t.Errorf("after the re-split the record names %q", s.Source().Quantizer)
	}
	now, _ := os.Stat(layer)
	if os.SameFile(old, now) {
		t.Error("layer.0.shard was kept: a shard from another quantizer must be quantized again")
	}
	after, _ := os.ReadFile(layer)
	if !bytes.Equal(before, after) {
		t.Error("the same encoder wrote different bytes")
	}
	// Unquantized: no quantizer recorded.
	n, err := Split(context.Background(), ck, SplitOptions{Out: filepath.Join(t.TempDir(), "n")})
	if err != nil {
		t.Fatal(err)
	}
	if n.Source().Quantizer != "" {
		t.Errorf("unquantized split records quantizer %q", n.Source().Quantizer)
	}
}

// tinyImportance returns an importance matrix for every Q8 target of ck, uneven (one heavy column each), and
// skipping skip.
func tinyImportance(ck *checkpoint.Checkpoint, skip string, seed float32) *imatrix.Matrix {
	m := &imatrix.Matrix{Columns: map[string][]float32{}}
	for _, t := range ck.Tensors {
		if Q8.Target(t) == t.DType || t.Name == skip {
			continue
		}
		v := make([]float32, t.Shape[1])
		for j := range v {
			v[j] = 1 + float32(j%7)
		}
		v[3] = seed
		m.Columns[t.Name] = v
	}
	return m
}

// TestSplitImportance: a q8 split with an importance matrix quantizes differently from one without, records
// the matrix's hash and keeps a copy that Verify uses; a matrix without an entry for a tensor quantizes that one
// unweighted; quantizing again with another matrix, or none, rewrites the quantized units (and removes the
// copy); a matrix whose width does not match, or one for an unquantized split, is refused; q4 takes one too.
func TestSplitImportance(t *testing.T) {
	ck := tinyCheckpoint(t, checkpoint.BF16)
	const down = "model.layers.1.mlp.down_proj.weight"
	imp := tinyImportance(ck, down, 1e4)
	out := filepath.Join(t.TempDir(), "s")
	plain, err := Split(context.Background(), ck, SplitOptions{Out: filepath.Join(t.TempDir(), "plain"), Quantize: Q8})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Split(context.Background(), ck, SplitOptions{Out: out, Quantize: Q8, Importance: imp})
	if err != nil {
		t.Fatal(err)
	}
	if q := s.Source().Quantizer; q != Q8.encoder(imp) || !strings.Contains(q, imp.Hash()) {
		t.Errorf("source record's quantizer %q, want %q", q, Q8.encoder(imp))
	}
	if rep, err := s.Verify(context.Background(), ck); err != nil || !rep.OK() {
		t.Fatalf("verify: %v %v", err, rep.Problems)
	}
	copied, err := imatrix.Read(filepath.Join(out, ImatrixFile))
	if err != nil || copied.Hash() != imp.Hash() {
		t.Fatalf("the split's copy of the matrix: %v (hash %v)", err, copied)
	}
	tensor := func(s *Set, unit, name string) []byte {
		l, err := s.Load(context.Background(), unit, NewBuffer(0))
		if err != nil {
			t.Fatal(err)
		}
		return bytes.Clone(l.Tensors[name].Data)
	}
	if bytes.Equal(tensor(s, "layer.0", "model.layers.0.mlp.up_proj.weight"), tensor(plain, "layer.0", "model.layers.0.mlp.up_proj.weight")) {
		t.Error("up_proj quantized with importances is byte for byte the unweighted one")
	}
	if !bytes.Equal(tensor(s, "layer.1", down), tensor(plain, "layer.1", down)) {
		t.Error("down_proj, which the matrix has no entry for, differs from the unweighted one")
	}
	// Verify against the copy catches a copy replaced by another matrix.
	if err := tinyImportance(ck, down, 5).Write(filepath.Join(out, ImatrixFile), nil); err != nil {
		t.Fatal(err)
	}
	if rep, _ := s.Verify(context.Background(), ck); rep.OK() {
		t.Error("verify passed with another importance matrix in the folder")
	}
	// Another matrix, then none: the quantized units are rewritten each time.
	for _, m := range []*imatrix.Matrix{tinyImportance(ck, down, 5), nil} {
		old, _ := os.Stat(filepath.Join(out, "layer.0.shard"))
		s, err = Split(context.Background(), ck, SplitOptions{Out: out, Quantize: Q8, Importance: m})
		if err != nil {
			t.Fatal(err)
		}
		now, _ := os.Stat(filepath.Join(out, "layer.0.shard"))
		if os.SameFile(old, now) {
			t.Errorf("importance %v: layer.0.shard was kept", m != nil)
		}
		if rep, err := s.Verify(context.Background(), ck); err != nil || !rep.OK() {
			t.Fatalf("importance %v: verify: %v %v", m != nil, err, rep.Problems)
		}
	}
	if _, err := os.Stat(filepath.Join(out, ImatrixFile)); !os.IsNotExist(err) {
		t.Errorf("a split without an importance matrix kept the copy: %v", err)
	}
	if !bytes.Equal(tensor(s, "layer.0", "model.layers.0.mlp.up_proj.weight"), tensor(plain, "layer.0", "model.layers.0.mlp.up_proj.weight")) {
		t.Error("re-split without the matrix: up_proj differs from the unweighted split's")
	}
	// Entries for tensors the checkpoint lacks are reported, and the split goes on.
	extra := tinyImportance(ck, "", 1)
	extra.Columns["model.layers.9.mlp.up_proj.weight"] = []float32{1}
	var logb bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logb, nil)))
	err = CheckImportance(ck, Q8, extra)
	slog.SetDefault(old)
	if err != nil || !strings.Contains(logb.String(), "model.layers.9.mlp.up_proj.weight") {
		t.Errorf("an entry for a tensor the checkpoint lacks: error %v, log %q", err, logb.String())
	}
	// A matrix that does not fit is refused before the folder changes.
	bad := tinyImportance(ck, "", 1)
	bad.Columns[down] = bad.Columns[down][:8]
	if _, err := Split(context.Background(), ck, SplitOptions{Out: out, Quantize: Q8, Importance: bad}); err == nil || !strings.Contains(err.Error(), down) {
		t.Errorf("a matrix 8 columns wide for %s: error %v", down, err)
	}
	if s, err := Open(out); err != nil {
		t.Errorf("the folder after a refused matrix: %v", err)
	} else if rep, err := s.Verify(context.Background(), ck); err != nil || !rep.OK() {
		t.Errorf("the folder after a refused matrix: verify %v %v", err, rep.Problems)
	}
	if _, err := Split(context.Background(), ck, SplitOptions{Out: filepath.Join(t.TempDir(), "none"), Importance: imp}); err == nil || !strings.Contains(err.Error(), "quantizes nothing") {
		t.Errorf("an unquantized split with an importance matrix: error %v", err)
	}
	// q4: Q4_K and Q4_1 weighted as ggml's encoders are (quant.QuantizeWeighted), verified against the copy.
	q4, err := Split(context.Background(), ck, SplitOptions{Out: filepath.Join(t.TempDir(), "q4"), Quantize: Q4, Importance: imp})
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := q4.Verify(context.Background(), ck); err != nil || !rep.OK() {
		t.Fatalf("q4 with an importance matrix: verify %v %v", err, rep.Problems)
	}
	q4plain, err := Split(context.Background(), ck, SplitOptions{Out: filepath.Join(t.TempDir(), "q4plain"), Quantize: Q4})
	if err != nil {
		t.Fatal(err)
	}
	const up = "model.layers.0.mlp.up_proj.weight"
	if bytes.Equal(tensor(q4, "layer.0", up), tensor(q4plain, "layer.0", up)) {
		t.Error("q4's up_proj quantized with importances is byte for byte the unweighted one")
	}
}

// TestSplitRequantizeResumed: a re-split with an importance matrix over a q8 split, interrupted a third of the
// way (the manifest, and with it the record of the old encoder, already gone), then run again: the units still
// holding the old encoder's blocks are quantized again (each shard records its encoder), and the result verifies.
func TestSplitRequantizeResumed(t *testing.T) {
	ck := tinyCheckpoint(t, checkpoint.BF16)
	out := filepath.Join(t.TempDir(), "s")
	if _, err := Split(context.Background(), ck, SplitOptions{Out: out, Quantize: Q8}); err != nil {
		t.Fatal(err)
	}
	imp := tinyImportance(ck, "", 1e4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base := int64(-1)
	_, err := Split(ctx, ck, SplitOptions{Out: out, Quantize: Q8, Importance: imp, Progress: func(done, total int64) {
		if base < 0 {
			base = done
		}
		if done > base && done > total/3 {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("the interrupted split: %v, want cancelled", err)
	}
	if _, err := os.Stat(filepath.Join(out, ManifestFile)); !os.IsNotExist(err) {
		t.Fatalf("the interrupted split left a manifest: %v", err)
	}
	s, err := Split(context.Background(), ck, SplitOptions{Out: out, Quantize: Q8, Importance: imp})
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := s.Verify(context.Background(), ck); err != nil || !rep.OK() {
		t.Errorf("the resumed split: verify %v, %d problems %q", err, len(rep.Problems), rep.Problems[:min(3, len(rep.Problems))])
	}
}

// TestRoutersKeepTheirDType: a mixture of experts' routers are not quantized (their rounding would change which
// experts a token goes to), its experts are.
func TestRoutersKeepTheirDType(t *testing.T) {
	for name, kept := range map[string]bool{
		"model.layers.0.mlp.gate.weight": true, "model.layers.3.block_sparse_moe.gate.weight": true,
		"model.layers.1.mlp.shared_expert_gate.weight": true, "model.layers.0.mlp.gate_proj.weight": false,
		"model.layers.0.mlp.experts.5.gate_proj.weight": false, "model.layers.2.block_sparse_moe.experts.0.w1.weight": false,
		"model.layers.1.router.proj.weight": true, "model.layers.1.feed_forward.router.weight": true,
		"model.layers.1.feed_forward.experts.0.gate_up_proj.weight": false,
	} {
		ti := checkpoint.TensorInfo{Name: name, DType: checkpoint.F32, Shape: []int64{256, 256}}
		for _, q := range []Quantization{Q8, Q4} {
			if got := q.Target(ti) == checkpoint.F32; got != kept {
				t.Errorf("%s %s: kept %v, want %v", q, name, got, kept)
			}
		}
	}
}
