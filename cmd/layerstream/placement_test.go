package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/guard"
	"github.com/layerstream/layerstream/internal/testutil"
)

func TestParseDevices(t *testing.T) {
	devs, err := parseDevices("cuda:0=24GiB, cuda:1=512MB,cpu=1000", false)
	if err != nil {
		t.Fatal(err)
	}
	want := []int64{24 << 30, 512e6, 1000}
	for i, d := range devs {
		if d.MemoryBytes != want[i] {
			t.Errorf("device %s: %d bytes, want %d", d.Name, d.MemoryBytes, want[i])
		}
	}
	for _, bad := range []string{"cuda", "=1GB", "cuda:0=", "cuda:0=-1GB", "cuda:0=lots"} {
		if _, err := parseDevices(bad, false); err == nil {
			t.Errorf("parseDevices(%q) accepted", bad)
		}
	}
}

// TestPlacementStories: embed, first and last layers, norm share the first device that holds them; the other
// layers go elsewhere with their boundaries listed; a plan that cannot hold them is a clear error (not a usage error).
func TestPlacementStories(t *testing.T) {
	model := testutil.SharedPath(t, "models", "stories260K-hf")
	var out bytes.Buffer
	if err := printPlacement(&out, model, "gpu0=700KB,gpu1=500KB", "f32", false); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{"primary gpu0", "embed, layer.0-1, layer.4, norm", "layer.2-3", "layer.1 (gpu0) -> layer.2 (gpu1)", "layer.3 (gpu1) -> layer.4 (gpu0)"} {
		if !strings.Contains(got, want) {
			t.Errorf("plan lacks %q:\n%s", want, got)
		}
	}
	err := printPlacement(&out, model, "gpu0=100KB,gpu1=100KB", "f32", false)
	if err == nil || errors.Is(err, errUsage) || !strings.Contains(err.Error(), "must share one device") {
		t.Fatalf("too-small devices: %v", err)
	}
}

// TestPlacementQuantizedPerDevice: a GGUF file's block-quantized layer is sized as the engine holds it on each
// device: its blocks on cpu (the host kernels read them in place), dequantized to --dtype on cuda (the graphs),
// so anchors that fit a cuda device only as blocks go to the cpu device instead (the plan placed them on
// cuda:0=1MB, where the dequantized 2.5 MiB do not fit).
func TestPlacementQuantizedPerDevice(t *testing.T) {
	const model = "../../gguf/testdata/tiny/tiny-llama-Q4_0.gguf"
	ck, err := engine.OpenCheckpoint(model)
	if err != nil {
		t.Fatal(err)
	}
	var blocks, float int64 // layer.0 as its blocks and norm weights; all of it in f32
	for _, ti := range ck.Tensors {
		if !strings.HasPrefix(ti.Name, "model.layers.0.") {
			continue
		}
		n := int64(4)
		for _, d := range ti.Shape {
			n *= d
		}
		float += n
		if ti.DType.Quantized() && len(ti.Shape) == 2 {
			blocks += ti.Length
		} else {
			blocks += n
		}
	}
	if blocks*4 > float {
		t.Fatalf("layer.0: %d bytes as blocks, %d in f32: want a quantized layer", blocks, float)
	}
	units, err := unitSizes(model, "f32")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		spec        string
		graphDecode bool
		want        int64
	}{
		{"cpu=1GB", false, blocks}, {"cpu:1=1GB", false, blocks}, {"cuda:0=1GB", false, float}, {"xla-cpu=1GB", false, float},
		{"cpu=1GB", true, float}, // --graph-decode: cpu computes with the graphs too
	} {
		devs, err := parseDevices(c.spec, c.graphDecode)
		if err != nil {
			t.Fatal(err)
		}
		p, err := guard.Plan(units, devs)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range p.Assignments {
			if a.Unit == "layer.0" && a.Bytes != c.want {
				t.Errorf("%s (graph decode %v): layer.0 takes %d bytes, want %d", c.spec, c.graphDecode, a.Bytes, c.want)
			}
		}
	}

	var out bytes.Buffer
	if err := printPlacement(&out, model, "cuda:0=1MB,cpu=1GB", "f32", false); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.Contains(got, "primary cpu") {
		t.Errorf("anchors of %d bytes (f32) planned onto cuda:0=1MB:\n%s", float, got)
	}
}
