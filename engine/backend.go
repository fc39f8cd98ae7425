package engine

import (
	"fmt"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/simplego"

	"github.com/layerstream/layerstream/guard"
)

// Devices (Options.Device).
const (
	// DeviceCPU is the pure-Go simplego backend, in every build.
	DeviceCPU = "cpu"
	// DeviceCUDA is an NVIDIA GPU through XLA's PJRT CUDA plugin (pjrt_c_api_cuda_plugin.so); needs the xla
	// build tag.
	DeviceCUDA = "cuda"
	// DeviceXLACPU is XLA's PJRT CPU plugin (pjrt_c_api_cpu_plugin.so): the code path CUDA takes (XLA-compiled
	// graphs for every step), runnable and testable without a GPU; needs the xla build tag.
	DeviceXLACPU = "xla-cpu"
)

// errNoXLA is the error for an XLA device in a binary built without the xla build tag.
func errNoXLA(device string) error {
	return fmt.Errorf("device %s: this binary was built without the xla build tag: rebuild with CGO_ENABLED=1 go build -tags xla ./cmd/layerstream; see README 'CUDA and XLA'", device)
}

// checkDevice validates Options.Device ("" is cpu) and returns its canonical name.
func checkDevice(device string) (string, error) {
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
