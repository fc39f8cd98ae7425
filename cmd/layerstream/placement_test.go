package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/internal/testutil"
)

func TestParseDevices(t *testing.T) {
	devs, err := parseDevices("cuda:0=24GiB, cuda:1=512MB,cpu=1000")
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
		if _, err := parseDevices(bad); err == nil {
			t.Errorf("parseDevices(%q) accepted", bad)
		}
	}
}

// TestPlacementStories: embed, first and last layers, norm share the first device that holds them; the other
// layers go elsewhere with their boundaries listed; a plan that cannot hold them is a clear error (not a usage error).
func TestPlacementStories(t *testing.T) {
	model := testutil.SharedPath(t, "models", "stories260K-hf")
	var out bytes.Buffer
	if err := printPlacement(&out, model, "gpu0=700KB,gpu1=500KB", "f32"); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{"primary gpu0", "embed, layer.0-1, layer.4, norm", "layer.2-3", "layer.1 (gpu0) -> layer.2 (gpu1)", "layer.3 (gpu1) -> layer.4 (gpu0)"} {
		if !strings.Contains(got, want) {
			t.Errorf("plan lacks %q:\n%s", want, got)
		}
	}
	err := printPlacement(&out, model, "gpu0=100KB,gpu1=100KB", "f32")
	if err == nil || errors.Is(err, errUsage) || !strings.Contains(err.Error(), "must share one device") {
		t.Fatalf("too-small devices: %v", err)
	}
}
