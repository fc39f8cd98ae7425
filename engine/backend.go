package engine

import (
	"fmt"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/simplego"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/guard"
)

// errNoXLA is the error for an XLA device in a binary built without the xla build tag.
func errNoXLA(device Device) error {
	return fmt.Errorf("device %s: this binary was built without the xla build tag: rebuild with CGO_ENABLED=1 go build -tags xla ./cmd/layerstream; see README 'CUDA and XLA'", device)
}

// checkDevice validates Options.Device ("" is cpu) and returns its canonical name.
func checkDevice(device Device) (Device, error) {
	switch device {
	case "", DeviceCPU:
		return DeviceCPU, nil
	case DeviceCUDA, DeviceXLACPU:
		if !xlaBuilt {
			return "", errNoXLA(device)
		}
		return device, nil
	}
	return "", fmt.Errorf("unknown device %q (supported: %s, %s, %s)", device, DeviceCPU, DeviceCUDA, DeviceXLACPU)
}

// ChooseDType is the compute dtype Open chooses for o's DType request (auto, f32, bf16 or f16; "" is auto) and a
// checkpoint whose config.json torch_dtype is torchDType, on o's Device as known before its backend opens: cuda
// at o.ComputeCapability (Open also reads the capability from the device's description when the plugin gives
// it). Tools that size a model without opening it (placement) call it to choose as generate does.
func ChooseDType(o Options, torchDType string) (guard.Choice, error) {
	if o.Device == "" {
		o.Device = DeviceCPU
	}
	caps := guard.CPU
	switch o.Device {
	case DeviceCPU:
	case DeviceCUDA, DeviceXLACPU:
		caps = guard.DeviceCaps{Name: string(o.Device)}
		if o.Device == DeviceCUDA {
			caps.ComputeCapability = o.ComputeCapability
		}
	default:
		_, err := checkDevice(o.Device)
		return guard.Choice{}, err
	}
	return chooseDType(o, torchDType, caps)
}

// chooseDType applies the dtype policy (guard.ChooseDType) on the device caps describes, and refuses what no
// backend computes (f16).
func chooseDType(o Options, torchDType string, caps guard.DeviceCaps) (guard.Choice, error) {
	choice, err := guard.ChooseDType(string(o.DType), torchDType, caps)
	if err != nil {
		return guard.Choice{}, err
	}
	if choice.DType != checkpoint.F32 && choice.DType != checkpoint.BF16 {
		return guard.Choice{}, fmt.Errorf("dtype %s is not supported by the %s backend (use f32 or bf16)", choice.DType, o.Device)
	}
	return choice, nil
}

// newBackend opens the compute backend of o.Device and describes the device for the dtype policy.
func newBackend(o Options) (backends.Backend, guard.DeviceCaps, error) {
	if o.Device != DeviceCPU {
		return newXLABackend(o)
	}
	// ops_sequential: simplego's parallel op scheduler races when one value feeds several reshapes (found with
	// go test -race: a consumer it believes owns the buffer rewrites its shape while another reads it). Matrix
	// products still use every core through their batch axis (see linear), which is where the time goes.
	b, err := simplego.New("ops_sequential")
	return b, guard.CPU, err
}
