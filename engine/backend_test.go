//go:build !xla

package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/synth"
)

// TestXLADevicesNeedTheTag: without the xla build tag, cuda and xla-cpu fail in Open with the rebuild command.
func TestXLADevicesNeedTheTag(t *testing.T) {
	model := writeTiny(t, synth.Options{Shape: tinyShape(true), Seed: 5})
	for _, dev := range []Device{DeviceCUDA, DeviceXLACPU} {
		_, err := Open(context.Background(), model, Options{Device: dev})
		if err == nil || !strings.Contains(err.Error(), "built without the xla build tag") ||
			!strings.Contains(err.Error(), "CGO_ENABLED=1 go build -tags xla ./cmd/layerstream") {
			t.Errorf("device %s: got %v, want the rebuild instructions", dev, err)
		}
	}
}
