package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/guard"
	"github.com/layerstream/layerstream/internal/testutil"
	"github.com/layerstream/layerstream/synth"
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
	if err := printPlacement(&out, model, "gpu0=700KB,gpu1=500KB", engine.Options{DType: "f32"}); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{"primary gpu0", "embed, layer.0-1, layer.4, norm", "layer.2-3", "layer.1 (gpu0) -> layer.2 (gpu1)", "layer.3 (gpu1) -> layer.4 (gpu0)"} {
		if !strings.Contains(got, want) {
			t.Errorf("plan lacks %q:\n%s", want, got)
		}
	}
	err := printPlacement(&out, model, "gpu0=100KB,gpu1=100KB", engine.Options{DType: "f32"})
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
	units, err := unitSizes(model, engine.Options{DType: "f32"})
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
	if err := printPlacement(&out, model, "cuda:0=1MB,cpu=1GB", engine.Options{DType: "f32"}); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.Contains(got, "primary cpu") {
		t.Errorf("anchors of %d bytes (f32) planned onto cuda:0=1MB:\n%s", float, got)
	}
}

// TestPlacementDTypeAsGenerate: placement chooses the compute dtype as generate does (--dtype auto by default,
// engine.ChooseDType, on the device of the first of --devices unless --device says): a bf16 checkpoint's layers
// are sized in f32 on a cuda device of unknown compute capability and in bf16 at 9.0, where generate computes in
// bf16; --dtype f16 is refused with the engine's own message.
func TestPlacementDTypeAsGenerate(t *testing.T) {
	dir := t.TempDir()
	shape := synth.Shape{HiddenSize: 32, IntermediateSize: 48, NumLayers: 2, NumHeads: 4, NumKVHeads: 2, VocabSize: 64, MaxPositionEmbeddings: 64, EOSTokenID: 2}
	if err := synth.Write(dir, synth.Options{Shape: shape, DType: checkpoint.BF16}); err != nil {
		t.Fatal(err)
	}
	const matrices = 32*32*2 + 32*16*2 + 32*48*3 // q, o; k, v (2 of 4 heads); gate, up, down
	for _, c := range []struct {
		args []string
		want checkpoint.DType
	}{
		{nil, checkpoint.F32},
		{[]string{"--compute-capability", "9.0"}, checkpoint.BF16},
		{[]string{"--compute-capability", "9.0", "--device", "cpu"}, checkpoint.F32},
		{[]string{"--compute-capability", "9.0", "--dtype", "f32"}, checkpoint.F32},
		{[]string{"--dtype", "bf16"}, checkpoint.BF16},
	} {
		var out, errb bytes.Buffer
		if code := run(append([]string{"placement", "-v", "--model", dir, "--devices", "cuda:0=1GB"}, c.args...), &out, &errb); code != 0 ||
			!strings.Contains(errb.String(), `msg="compute dtype" dtype=`+string(c.want)+" ") {
			t.Errorf("placement %q: exit %d, want compute dtype %s:\n%s", c.args, code, c.want, errb.String())
		}
	}
	for _, c := range []struct {
		o    engine.Options
		want int64
	}{
		{engine.Options{Device: "cuda"}, 4 * matrices},
		{engine.Options{Device: "cuda", ComputeCapability: 9}, 2 * matrices},
	} {
		units, err := unitSizes(dir, c.o)
		if err != nil {
			t.Fatal(err)
		}
		if got := units[1].Bytes - 2*32*4; units[1].Name != "layer.0" || got != c.want { // less the two norm weights
			t.Errorf("%+v: %s's matrices take %d bytes on cuda, want %d", c.o, units[1].Name, got, c.want)
		}
	}

	_, err := engine.Open(context.Background(), dir, engine.Options{DType: "f16"})
	if err == nil {
		t.Fatal("the engine computes f16 on cpu")
	}
	var out, errb bytes.Buffer
	if code := run([]string{"placement", "--model", dir, "--devices", "cpu=1GB", "--dtype", "f16"}, &out, &errb); code != 1 || !strings.Contains(err.Error(), strings.TrimSpace(strings.TrimPrefix(errb.String(), "layerstream placement: "))) {
		t.Errorf("placement --dtype f16: exit %d, %q; the engine refuses it with %q", code, errb.String(), err)
	}
}
