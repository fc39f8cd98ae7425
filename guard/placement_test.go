package guard

import (
	"fmt"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/internal/testutil"
	"github.com/layerstream/layerstream/quant"
)

const mib = 1 << 20

func model(layers int, layerBytes int64, head bool) []UnitSize {
	u := []UnitSize{{"embed", 100 * mib, 100 * mib}}
	for i := range layers {
		u = append(u, UnitSize{fmt.Sprintf("layer.%d", i), layerBytes, layerBytes})
	}
	u = append(u, UnitSize{"norm", 1, 1})
	if head {
		u = append(u, UnitSize{"lm_head", 100 * mib, 100 * mib})
	}
	return u
}

func checkAnchors(t *testing.T, p *Placement, layers int) {
	t.Helper()
	for _, u := range []string{"embed", "layer.0", fmt.Sprintf("layer.%d", layers-1), "norm", "lm_head"} {
		if d, ok := p.DeviceOf(u); ok && d != p.Primary {
			t.Fatalf("%s on %s, want the primary %s\n%s", u, d, p.Primary, p)
		}
	}
	for _, d := range p.Devices {
		if p.Used(d.Name) > d.MemoryBytes {
			t.Fatalf("%s over capacity\n%s", d.Name, p)
		}
	}
	// Every device change along the forward pass is listed as a boundary.
	var n int
	for i := 1; i < len(p.Assignments); i++ {
		if p.Assignments[i].Device != p.Assignments[i-1].Device {
			b := p.Boundaries[n]
			if b.After != p.Assignments[i-1].Unit || b.Before != p.Assignments[i].Unit {
				t.Fatalf("boundary %d is %+v\n%s", n, b, p)
			}
			n++
		}
	}
	if n != len(p.Boundaries) {
		t.Fatalf("%d device changes, %d boundaries\n%s", n, len(p.Boundaries), p)
	}
}

func TestPlanTwoGPUs(t *testing.T) {
	p, err := Plan(model(32, 200*mib, true), []Device{{"cuda:0", 4096 * mib, false}, {"cuda:1", 4096 * mib, false}})
	if err != nil {
		t.Fatal(err)
	}
	checkAnchors(t, p, 32)
	if len(p.Boundaries) != 2 || p.Boundaries[0].To != "cuda:1" || p.Boundaries[1].Before != "layer.31" {
		t.Fatalf("boundaries %+v\n%s", p.Boundaries, p)
	}
	// Spread by memory: both GPUs carry a similar load.
	a, b := p.Used("cuda:0"), p.Used("cuda:1")
	if a-b > 400*mib || b-a > 400*mib {
		t.Fatalf("unbalanced: %d vs %d\n%s", a, b, p)
	}
	s := p.String()
	for _, want := range []string{"cuda:0", "embed, layer.0-", "layer.31, norm, lm_head", "2 device boundaries", "-> layer.31 (cuda:0)"} {
		if !strings.Contains(s, want) {
			t.Fatalf("String() lacks %q:\n%s", want, s)
		}
	}
}

func TestPlanGPUAndCPU(t *testing.T) {
	// The first device cannot hold the anchored units: the CPU becomes primary, the GPU takes middle layers.
	p, err := Plan(model(8, 100*mib, false), []Device{{"cuda:0", 250 * mib, false}, {"cpu", 2048 * mib, false}})
	if err != nil {
		t.Fatal(err)
	}
	checkAnchors(t, p, 8)
	if p.Primary != "cpu" || p.Used("cuda:0") == 0 {
		t.Fatalf("plan:\n%s", p)
	}
	// One device, one layer: everything together, no boundaries.
	p, err = Plan(model(1, 10*mib, true), []Device{{"cuda:0", 1024 * mib, false}})
	if err != nil || len(p.Boundaries) != 0 || !strings.Contains(p.String(), "no device boundaries") {
		t.Fatalf("%v\n%v", err, p)
	}
}

func TestPlanImpossible(t *testing.T) {
	for _, c := range []struct {
		name    string
		units   []UnitSize
		devices []Device
		errHas  string
	}{
		{"anchors fit nowhere", model(4, 10*mib, true), []Device{{"cuda:0", 150 * mib, false}, {"cuda:1", 150 * mib, false}}, "must share one device"},
		{"too small in total", model(40, 100*mib, true), []Device{{"cuda:0", 1024 * mib, false}, {"cuda:1", 1024 * mib, false}}, "short"},
		{"whole layers do not fit", model(4, 100*mib, false), []Device{{"a", 400 * mib, false}, {"b", 150 * mib, false}}, "not as whole layers"},
		{"no devices", model(2, 1, false), nil, "no devices"},
		{"duplicate device", model(2, 1, false), []Device{{"a", 1 << 30, false}, {"a", 1 << 30, false}}, "unique"},
		{"missing layer", []UnitSize{{"embed", 1, 1}, {"layer.0", 1, 1}, {"layer.2", 1, 1}, {"norm", 1, 1}}, []Device{{"a", 1 << 30, false}}, "layer.1 missing"},
		{"unknown unit", []UnitSize{{"embed", 1, 1}, {"layer.0", 1, 1}, {"norm", 1, 1}, {"vision", 1, 1}}, []Device{{"a", 1 << 30, false}}, "unknown unit"},
	} {
		_, err := Plan(c.units, c.devices)
		if err == nil || !strings.Contains(err.Error(), c.errHas) {
			t.Errorf("%s: want error containing %q, got %v", c.name, c.errHas, err)
		}
	}
}

func TestUnitSizesStories(t *testing.T) {
	ck, err := checkpoint.Open(testutil.SharedPath(t, "models", "stories260K-hf"))
	if err != nil {
		t.Fatal(err)
	}
	units, err := UnitSizes(ck, checkpoint.BF16)
	if err != nil {
		t.Fatal(err)
	}
	// hidden 64, 8 heads / 4 kv heads of 8, intermediate 172, vocab 512, tied (no lm_head).
	layer := int64(2*(64*64+32*64+32*64+64*64+3*172*64)) + 4*2*64
	want := []UnitSize{{"embed", 2 * 512 * 64, 2 * 512 * 64}, {"layer.0", layer, layer}, {"layer.1", layer, layer}, {"layer.2", layer, layer},
		{"layer.3", layer, layer}, {"layer.4", layer, layer}, {"norm", 4 * 64, 4 * 64}}
	if fmt.Sprint(units) != fmt.Sprint(want) {
		t.Fatalf("got %v\nwant %v", units, want)
	}
	p, err := Plan(units, []Device{{"gpu0", 300 << 10, false}, {"gpu1", 300 << 10, false}})
	if err != nil {
		t.Fatal(err)
	}
	checkAnchors(t, p, 5)
}

// TestUnitSizesQuantized: a block-quantized matrix (a GGUF file's) is held as its blocks where the host kernels
// read it in place (InPlaceBytes), and dequantized to the dtype asked for the float matrices elsewhere (Bytes).
func TestUnitSizesQuantized(t *testing.T) {
	q8 := checkpoint.DTypeOf(quant.Q8_0)
	ck := &checkpoint.Checkpoint{Config: &checkpoint.Config{NumHiddenLayers: 1}, Tensors: []checkpoint.TensorInfo{
		{Name: "model.embed_tokens.weight", DType: checkpoint.F16, Shape: []int64{100, 64}, Length: 2 * 100 * 64},
		{Name: "model.layers.0.mlp.down_proj.weight", DType: q8, Shape: []int64{64, 64}, Length: 64 * 2 * 34},
		{Name: "model.layers.0.input_layernorm.weight", DType: checkpoint.F32, Shape: []int64{64}, Length: 4 * 64},
		{Name: "model.norm.weight", DType: checkpoint.F32, Shape: []int64{64}, Length: 4 * 64},
	}}
	units, err := UnitSizes(ck, checkpoint.F32)
	if err != nil {
		t.Fatal(err)
	}
	want := []UnitSize{{"embed", 4 * 100 * 64, 4 * 100 * 64}, {"layer.0", 4*64*64 + 4*64, 64*2*34 + 4*64}, {"norm", 4 * 64, 4 * 64}}
	if fmt.Sprint(units) != fmt.Sprint(want) {
		t.Errorf("got %v\nwant %v", units, want)
	}
}

// TestPlanPerDeviceSizes: each unit counts as held on its device (On): a quantized model whose anchors fit a cuda
// device only as blocks goes to the cpu device, and the middle layers spread by how many each device holds.
func TestPlanPerDeviceSizes(t *testing.T) {
	units := []UnitSize{{"embed", 100 * mib, 25 * mib}}
	for i := range 8 {
		units = append(units, UnitSize{fmt.Sprintf("layer.%d", i), 100 * mib, 25 * mib})
	}
	units = append(units, UnitSize{"norm", 1, 1}, UnitSize{"lm_head", 100 * mib, 25 * mib})
	devices := []Device{{"cuda:0", 250 * mib, false}, {"cpu", 300 * mib, true}}
	p, err := Plan(units, devices)
	if err != nil {
		t.Fatal(err)
	}
	if p.Primary != "cpu" {
		t.Errorf("primary %s, want cpu (the anchors take 400 MiB dequantized on cuda:0=250MiB):\n%s", p.Primary, p)
	}
	size := map[string]UnitSize{}
	for _, u := range units {
		size[u.Name] = u
	}
	onCUDA := 0
	for _, a := range p.Assignments {
		d := devices[1]
		if a.Device == "cuda:0" {
			d, onCUDA = devices[0], onCUDA+1
		}
		if want := size[a.Unit].On(d); a.Bytes != want {
			t.Errorf("%s on %s: %d bytes, want %d", a.Unit, a.Device, a.Bytes, want)
		}
	}
	if onCUDA == 0 || p.Used("cuda:0") > 250*mib || p.Used("cpu") > 300*mib {
		t.Errorf("want some middle layers on cuda:0 and every device within its memory:\n%s", p)
	}
	for name, want := range map[string]bool{"cpu": true, "CPU:1": true, "cuda:0": false, "xla-cpu": false, "gpu0": false} {
		if got := InPlaceDevice(name, false); got != want {
			t.Errorf("InPlaceDevice(%q) = %v, want %v", name, got, want)
		}
	}
	if InPlaceDevice("cpu", true) {
		t.Error("InPlaceDevice(cpu, graph decode) = true, want false")
	}
}
