package guard

import (
	"strings"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
)

func TestChooseDType(t *testing.T) {
	t4 := DeviceCaps{Name: "cuda:0 (T4)", NativeF16: true, ComputeCapability: 7.5}
	a100 := DeviceCaps{Name: "cuda:0 (A100)", NativeBF16: true, NativeF16: true, ComputeCapability: 8.0}
	for _, c := range []struct {
		req, torch string
		dev        DeviceCaps
		force      bool
		want       checkpoint.DType
		warn       bool
		errHas     string
	}{
		{req: "auto", torch: "bfloat16", dev: CPU, want: checkpoint.F32},
		{req: "", torch: "float32", dev: CPU, want: checkpoint.F32},
		{req: "auto", torch: "", dev: a100, want: checkpoint.F32},
		{req: "auto", torch: "bfloat16", dev: a100, want: checkpoint.BF16},
		{req: "auto", torch: "bfloat16", dev: t4, want: checkpoint.F32}, // never f16 for a bf16 checkpoint
		{req: "auto", torch: "float16", dev: t4, want: checkpoint.F16},
		{req: "auto", torch: "float16", dev: CPU, want: checkpoint.F32},
		{req: "f32", torch: "bfloat16", dev: a100, want: checkpoint.F32},
		{req: "bf16", torch: "bfloat16", dev: a100, want: checkpoint.BF16},
		{req: "bf16", torch: "bfloat16", dev: CPU, want: checkpoint.BF16, warn: true}, // emulated: slower
		{req: "bf16", torch: "bfloat16", dev: t4, errHas: "does not compute bfloat16 natively"},
		{req: "bf16", torch: "bfloat16", dev: t4, force: true, want: checkpoint.BF16, warn: true},
		{req: "f16", torch: "bfloat16", dev: a100, errHas: "trained in bf16"},
		{req: "f16", torch: "bfloat16", dev: a100, force: true, want: checkpoint.F16, warn: true},
		{req: "f16", torch: "float16", dev: t4, want: checkpoint.F16},
		{req: "f16", torch: "float16", dev: CPU, errHas: "does not compute float16"},
		{req: "f16", torch: "float16", dev: CPU, force: true, errHas: "does not compute float16"},
		{req: "int8", torch: "float16", dev: CPU, errHas: "want auto, f32, bf16 or f16"},
	} {
		got, err := DTypePolicy{Force: c.force}.Choose(c.req, c.torch, c.dev)
		name := c.req + "/" + c.torch + "/" + c.dev.Name
		if c.errHas != "" {
			if err == nil || !strings.Contains(err.Error(), c.errHas) {
				t.Errorf("%s force=%v: want error containing %q, got %v (%+v)", name, c.force, c.errHas, err, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s force=%v: %v", name, c.force, err)
			continue
		}
		if got.DType != c.want || got.Reason == "" || (got.Warning != "") != c.warn {
			t.Errorf("%s force=%v: got %+v, want %s (warning %v)", name, c.force, got, c.want, c.warn)
		}
	}
	if c, err := ChooseDType("auto", "bfloat16", CPU); err != nil || c.DType != checkpoint.F32 || !strings.Contains(c.Reason, "cpu") {
		t.Fatalf("ChooseDType: %+v %v", c, err)
	}
}
