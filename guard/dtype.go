package guard

import (
	"fmt"
	"strings"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/internal/sections"
)

// DeviceCaps describes what a compute device does natively.
type DeviceCaps struct {
	Name       string // e.g. "cpu", "cuda:0 (NVIDIA H100)"
	NativeBF16 bool
	NativeF16  bool
	// ComputeCapability is the CUDA compute capability (8.0 for A100); 0 for devices that are not CUDA GPUs.
	ComputeCapability float64
}

// CPU is the pure-Go simplego backend: float32 is its native compute type, bfloat16 is emulated (correct but
// slower, and its reductions accumulate in bf16), float16 is not supported.
var CPU = DeviceCaps{Name: "cpu"}

func (d DeviceCaps) bf16() bool { return d.NativeBF16 || d.ComputeCapability >= 8.0 }
func (d DeviceCaps) f16() bool  { return d.NativeF16 || d.ComputeCapability >= 6.0 }
func (d DeviceCaps) gpu() bool  { return d.ComputeCapability > 0 }

// Choice is the compute dtype chosen for a run. The engine logs one line with DType and Reason, and Warning (when
// not empty) as a warning.
type Choice struct {
	DType   checkpoint.DType
	Reason  string
	Warning string
}

// DTypePolicy chooses compute dtypes. Force lets an explicit request through where the policy would refuse it as
// unsafe (float16 for a checkpoint trained in bfloat16, bfloat16 on a GPU that does not compute it natively); the
// Choice then carries a warning.
type DTypePolicy struct {
	Force bool
}

// ChooseDType applies the default (unforced) policy: see DTypePolicy.Choose.
func ChooseDType(req, torchDType string, dev DeviceCaps) (Choice, error) {
	return DTypePolicy{}.Choose(req, torchDType, dev)
}

// Choose picks the compute dtype for request req ("auto", "f32", "bf16" or "f16"; "" means auto), the checkpoint's
// config.json torch_dtype (e.g. "bfloat16"; may be empty) and the device.
//
// auto: the checkpoint's dtype where the device computes it natively, else float32 (exact for bf16 and f16
// weights, at twice the memory traffic). float16 is never chosen automatically for a bf16 checkpoint: bf16 values
// routinely exceed float16's range (65504) and overflow to Inf/NaN.
func (p DTypePolicy) Choose(req, torchDType string, dev DeviceCaps) (Choice, error) {
	trained, _ := checkpoint.ParseTorchDType(torchDType)
	want, err := parseRequest(req)
	if err != nil {
		return Choice{}, err
	}
	devName := dev.Name
	if devName == "" {
		devName = "the device"
	}
	trainedName := string(trained)
	if trained == "" {
		trainedName = fmt.Sprintf("unknown (torch_dtype %q)", torchDType)
	}
	switch want {
	case "": // auto
		switch {
		case trained == checkpoint.BF16 && dev.bf16():
			return Choice{DType: checkpoint.BF16, Reason: fmt.Sprintf("auto: checkpoint is bf16 and %s computes bf16 natively", devName)}, nil
		case trained == checkpoint.F16 && dev.f16():
			return Choice{DType: checkpoint.F16, Reason: fmt.Sprintf("auto: checkpoint is f16 and %s computes f16 natively", devName)}, nil
		case trained == checkpoint.BF16 || trained == checkpoint.F16:
			return Choice{DType: checkpoint.F32, Reason: fmt.Sprintf("auto: checkpoint is %s but %s does not compute it natively; f32 is exact and safe (twice the bytes per weight)", trained, devName)}, nil
		default:
			return Choice{DType: checkpoint.F32, Reason: fmt.Sprintf("auto: checkpoint dtype %s; f32 is the safe default", trainedName)}, nil
		}
	case checkpoint.F32:
		c := Choice{DType: checkpoint.F32, Reason: "requested f32"}
		if trained == checkpoint.BF16 || trained == checkpoint.F16 {
			c.Reason += fmt.Sprintf(" (checkpoint is %s: widening is exact, weights take twice the bytes)", trained)
		}
		return c, nil
	case checkpoint.BF16:
		c := Choice{DType: checkpoint.BF16, Reason: "requested bf16"}
		switch {
		case dev.bf16():
		case dev.gpu() && !p.Force:
			return Choice{}, fmt.Errorf("dtype bf16: %s (compute capability %.1f) does not compute bfloat16 natively (needs 8.0 or newer); emulated bf16 on such GPUs gives NaN or all-\"!!!!\" output. Use --dtype f32, or force bf16 (see %s)", devName, dev.ComputeCapability, sections.Anchor(sections.DType))
		case dev.gpu():
			c.Warning = fmt.Sprintf("bf16 forced on %s, which does not compute it natively: expect NaN or \"!!!!\" output (see %s)", devName, sections.Anchor(sections.Punctuation))
		default:
			c.Warning = fmt.Sprintf("bf16 is emulated on %s: slower than f32 and with bf16 accumulation in reductions (see %s)", devName, sections.Anchor(sections.DType))
		}
		if trained == checkpoint.F32 {
			c.Reason += " (checkpoint is f32: weights are rounded to bf16, expect logits to differ by ~1e-2)"
		}
		return c, nil
	case checkpoint.F16:
		if !dev.f16() {
			return Choice{}, fmt.Errorf("dtype f16: %s does not compute float16 (the CPU backend has no float16 support); use --dtype f32 or bf16 (see %s)", devName, sections.Anchor(sections.DType))
		}
		c := Choice{DType: checkpoint.F16, Reason: "requested f16"}
		if trained == checkpoint.BF16 {
			if !p.Force {
				return Choice{}, fmt.Errorf("dtype f16: the checkpoint was trained in bf16, whose values overflow float16 (max 65504) to Inf/NaN; use --dtype bf16 or f32, or force f16 (see %s)", sections.Anchor(sections.DType))
			}
			c.Warning = fmt.Sprintf("f16 forced for a bf16 checkpoint: activations above 65504 overflow to Inf/NaN (see %s)", sections.Anchor(sections.NaN))
		}
		return c, nil
	}
	return Choice{}, fmt.Errorf("dtype %q: want auto, f32, bf16 or f16", req)
}

func parseRequest(req string) (checkpoint.DType, error) {
	switch strings.ToLower(strings.TrimSpace(req)) {
	case "", "auto":
		return "", nil
	case "f32", "float32", "fp32":
		return checkpoint.F32, nil
	case "bf16", "bfloat16":
		return checkpoint.BF16, nil
	case "f16", "float16", "fp16", "half":
		return checkpoint.F16, nil
	}
	return "", fmt.Errorf("dtype %q: want auto, f32, bf16 or f16", req)
}
