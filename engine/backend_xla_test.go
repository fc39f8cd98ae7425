//go:build xla

package engine

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/internal/hffixture"
	"github.com/layerstream/layerstream/internal/testutil"
	"github.com/layerstream/layerstream/synth"
)

// needXLACPU skips the test when no XLA CPU plugin is on PJRT_PLUGIN_LIBRARY_PATH (see README "CUDA and XLA").
func needXLACPU(t *testing.T) {
	t.Helper()
	if _, err := findPlugin(DeviceXLACPU); err != nil {
		t.Skipf("no XLA CPU plugin: %v", err)
	}
}

// xlaModes are the two ways weights reach an XLA device: shared host buffers (the CPU plugin) and copies from
// host staging buffers (what CUDA does).
var xlaModes = []struct {
	name string
	opts Options
}{
	{"shared", Options{Device: DeviceXLACPU}},
	{"copy", Options{Device: DeviceXLACPU, NoSharedBuffers: true}},
}

// TestXLAMissingPlugin: with no plugin on PJRT_PLUGIN_LIBRARY_PATH, Open names the file, where it looked and
// what to install.
func TestXLAMissingPlugin(t *testing.T) {
	model := writeTiny(t, synth.Options{Shape: tinyShape(true), Seed: 5})
	empty := t.TempDir()
	t.Setenv(pluginPathEnv, empty)
	for dev, want := range map[Device]string{DeviceCUDA: "jax-cuda13-pjrt", DeviceXLACPU: "lammps-jax-pjrt-cpu"} {
		_, err := Open(context.Background(), model, Options{Device: dev})
		file := "pjrt_c_api_" + pluginName(dev) + "_plugin.so"
		if err == nil {
			t.Fatalf("device %s: Open succeeded with an empty plugin folder", dev)
		}
		for _, s := range []string{file + " not found", empty, want, "README"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("device %s: error %q does not mention %q", dev, err, s)
			}
		}
	}
}

// TestXLAGoldenStories260K: the golden generations and logits of engine/golden_test.go through XLA, with both
// transfer paths, streamed and resident.
func TestXLAGoldenStories260K(t *testing.T) {
	needXLACPU(t)
	model := testutil.SharedPath(t, "models", "stories260K-hf")
	for _, m := range xlaModes {
		for _, resident := range []bool{false, true} {
			name := m.name + "/streamed"
			if resident {
				name = m.name + "/resident"
			}
			t.Run(name, func(t *testing.T) {
				o := m.opts
				o.Resident = resident
				e := open(t, model, o)
				if shared := e.backend.HasSharedBuffers(); shared == o.NoSharedBuffers {
					t.Fatalf("backend shares buffers: %v, want %v", shared, !o.NoSharedBuffers)
				}
				checkGolden(t, e)
			})
		}
	}
}

// TestCUDAGoldenStories260K is the golden test on a GPU: it runs where a CUDA plugin is on
// PJRT_PLUGIN_LIBRARY_PATH (see README "CUDA and XLA"), streamed and resident.
func TestCUDAGoldenStories260K(t *testing.T) {
	if _, err := findPlugin(DeviceCUDA); err != nil {
		t.Skipf("no CUDA plugin: %v", err)
	}
	model := testutil.SharedPath(t, "models", "stories260K-hf")
	for _, resident := range []bool{false, true} {
		t.Run(map[bool]string{false: "streamed", true: "resident"}[resident], func(t *testing.T) {
			checkGolden(t, open(t, model, Options{Device: DeviceCUDA, Resident: resident}))
		})
	}
}

// TestXLAMatchesCPU: streamed through XLA (both paths, bf16 weights too), a model gives the cpu backend's
// tokens and logits, and the device budget bounds the layer buffers as on cpu.
func TestXLAMatchesCPU(t *testing.T) {
	needXLACPU(t)
	ctx := context.Background()
	for _, dt := range []checkpoint.DType{checkpoint.F32, checkpoint.BF16} {
		model := writeTiny(t, synth.Options{Shape: tinyShape(false), Seed: 11, DType: dt})
		ref := open(t, model, Options{Resident: true, DType: "f32"})
		req := Request{PromptIDs: []int{1, 7, 3}, MaxNewTokens: 6, StopIDs: []int{}}
		want, err := ref.Generate(ctx, req, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids := []int{1, 9, 17, 33, 5}
		wantLogits, err := ref.Logits(ctx, ids)
		if err != nil {
			t.Fatal(err)
		}
		layerBytes := int64(0)
		for _, s := range ref.store.layerSpecs {
			layerBytes += int64(s.dtype.Size()) * int64(sizeOf(s.shape))
		}
		for _, m := range xlaModes {
			t.Run(string(dt)+"/"+m.name, func(t *testing.T) {
				o := m.opts
				o.DType = "f32"
				o.DeviceBudget = layerBytes * 5 / 2
				o.Prefetch = 3
				e := open(t, model, o)
				res, err := e.Generate(ctx, req, nil)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(res.GeneratedIDs, want.GeneratedIDs) {
					t.Errorf("generated %v, cpu %v", res.GeneratedIDs, want.GeneratedIDs)
				}
				got, err := e.Logits(ctx, ids)
				if err != nil {
					t.Fatal(err)
				}
				if d := maxDiff(got, wantLogits); d > 1e-4 {
					t.Errorf("logits differ from cpu by %g", d)
				}
				s := e.Stats()
				if s.LayerBuffers != 2 || s.PeakLayerBuffersInUse < 1 || s.PeakLayerBuffersInUse > 2 {
					t.Errorf("layer buffers %d (peak in use %d), budget 2", s.LayerBuffers, s.PeakLayerBuffersInUse)
				}
			})
		}
	}
}

// TestXLAHFFixtures: transformers' fixtures (TestHFFixtures) on the XLA CPU device, where every step runs as an
// XLA-compiled graph (the path CUDA takes): greedy ids equal, logits within 2e-4 of transformers'. XLA's compiler
// orders float32 sums its own way: on llama2 (logits up to ~30) its logits differ from transformers' by 1.05e-4,
// where the engine's host kernels and simplego graphs stay within 8.2e-5 and the float64 reference itself differs
// from transformers' float32 by 7.5e-5.
func TestXLAHFFixtures(t *testing.T) {
	needXLACPU(t)
	forHFFixtures(t, []string{hffixture.V5}, Options{Device: DeviceXLACPU}, func(t *testing.T, c *hfCase) {
		if c.refused != nil {
			t.Skipf("refused: %v", c.refused)
		}
		c.tolerance = 2e-4
		c.checkLogits()
		c.checkGreedy("greedy (xla-cpu)", c.e)
	})
}

func sizeOf(dims []int) int {
	n := 1
	for _, d := range dims {
		n *= d
	}
	return n
}

// TestSetCUDADataDir: XLA_FLAGS gets the pip layout's nvidia/cu13 folder next to jax_plugins/, found through
// the plugin's symlink, and an XLA_FLAGS that already sets it is left alone.
func TestSetCUDADataDir(t *testing.T) {
	site := t.TempDir()
	real := filepath.Join(site, "jax_plugins", "xla_cuda13", "xla_cuda_plugin.so")
	link := filepath.Join(t.TempDir(), "pjrt_c_api_cuda_plugin.so")
	for _, err := range []error{
		os.MkdirAll(filepath.Join(site, "nvidia", "cu13", "nvvm", "libdevice"), 0o755),
		os.MkdirAll(filepath.Dir(real), 0o755),
		os.WriteFile(real, nil, 0o644),
		os.Symlink(real, link),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}

	t.Setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x")
	setCUDADataDir(link)
	want := "--xla_dump_to=/tmp/x --xla_gpu_cuda_data_dir=" + filepath.Join(site, "nvidia", "cu13")
	if got := os.Getenv("XLA_FLAGS"); got != want {
		t.Errorf("XLA_FLAGS %q, want %q", got, want)
	}
	t.Setenv("XLA_FLAGS", "--xla_gpu_cuda_data_dir=/opt/cuda")
	setCUDADataDir(link)
	if got := os.Getenv("XLA_FLAGS"); got != "--xla_gpu_cuda_data_dir=/opt/cuda" {
		t.Errorf("XLA_FLAGS %q was changed", got)
	}
}
