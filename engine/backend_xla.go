//go:build xla

package engine

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/xla"

	"github.com/layerstream/layerstream/guard"
)

// xlaBuilt reports whether this binary has the XLA backend (the xla build tag).
const xlaBuilt = true

// pluginPathEnv is the colon-separated list of folders searched for PJRT plugins (go-xla's convention).
const pluginPathEnv = "PJRT_PLUGIN_LIBRARY_PATH"

func init() {
	// go-xla would otherwise download plugins from GitHub on first use: the engine finds them itself and says
	// what to install when one is missing.
	xla.EnableAutoInstall(false)
}

// pluginName is the PJRT plugin a device runs on.
func pluginName(device Device) string {
	if device == DeviceCUDA {
		return "cuda"
	}
	return "cpu"
}

// pluginDirs are the folders searched for plugins: $PJRT_PLUGIN_LIBRARY_PATH when set, else go-xla's install
// folders.
func pluginDirs() []string {
	if v, ok := os.LookupEnv(pluginPathEnv); ok {
		var dirs []string
		for _, d := range strings.Split(v, ":") {
			if d != "" {
				dirs = append(dirs, d)
			}
		}
		return dirs
	}
	var dirs []string
	if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, ".local", "lib", "go-xla"))
	}
	return append(dirs, "/usr/local/lib/go-xla")
}

// findPlugin returns the absolute path of pjrt_c_api_<name>_plugin.so in the first plugin folder holding it,
// or an error saying where it looked and what to install.
func findPlugin(device Device) (string, error) {
	file := "pjrt_c_api_" + pluginName(device) + "_plugin.so"
	dirs := pluginDirs()
	for _, d := range dirs {
		p := filepath.Join(d, file)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return filepath.Abs(p)
		}
	}
	where := fmt.Sprintf("%s=%q", pluginPathEnv, os.Getenv(pluginPathEnv))
	if _, ok := os.LookupEnv(pluginPathEnv); !ok {
		where = fmt.Sprintf("%s unset; searched %s", pluginPathEnv, strings.Join(dirs, ", "))
	}
	install := "pip download --no-deps lammps-jax-pjrt-cpu==0.11.2 and unzip the wheel: it holds lammps_jax_pjrt_cpu/pjrt_c_api_cpu_plugin.so; put that folder on " + pluginPathEnv
	if device == DeviceCUDA {
		install = "pip install jax-cuda13-pjrt (jax-cuda12-pjrt for CUDA 12 drivers) and link its jax_plugins/xla_cuda13/xla_cuda_plugin.so as pjrt_c_api_cuda_plugin.so in a folder on " + pluginPathEnv
	}
	return "", fmt.Errorf("device %s: PJRT plugin %s not found (%s): %s; see README 'CUDA and XLA'", device, file, where, install)
}

// setCUDADataDir points XLA at the CUDA toolkit files it compiles with (nvvm/libdevice, ptxas) when XLA_FLAGS
// does not: go-xla would otherwise set --xla_gpu_cuda_data_dir to a path hard-coded in its source. The pip
// layout keeps them in site-packages/nvidia/{cu13,cuda_nvcc}, next to jax_plugins/ holding the plugin.
func setCUDADataDir(plugin string) {
	flags := os.Getenv("XLA_FLAGS")
	if strings.Contains(flags, "--xla_gpu_cuda_data_dir") {
		return
	}
	dirs := []string{filepath.Dir(plugin)}
	if real, err := filepath.EvalSymlinks(plugin); err == nil {
		dirs = append(dirs, filepath.Dir(real))
	}
	var candidates []string
	for _, d := range dirs {
		for _, nv := range []string{filepath.Join(d, "..", "nvidia"), filepath.Join(d, "..", "..", "nvidia")} {
			candidates = append(candidates, filepath.Join(nv, "cu13"), filepath.Join(nv, "cuda_nvcc"))
		}
	}
	candidates = append(candidates, "/usr/local/cuda")
	for _, c := range candidates {
		if fi, err := os.Stat(filepath.Join(c, "nvvm", "libdevice")); err == nil && fi.IsDir() {
			c = filepath.Clean(c)
			os.Setenv("XLA_FLAGS", strings.TrimSpace(flags+" --xla_gpu_cuda_data_dir="+c))
			slog.Info("XLA_FLAGS", "value", os.Getenv("XLA_FLAGS"))
			return
		}
	}
	slog.Warn("no CUDA data folder (nvvm/libdevice) found next to the plugin or in /usr/local/cuda: set XLA_FLAGS=--xla_gpu_cuda_data_dir=DIR if compilation fails", "plugin", plugin)
}

var computeCapabilityRE = regexp.MustCompile(`(?i)compute[_ ]?capability[^0-9]{0,4}([0-9]+(?:\.[0-9]+)?)`)

// newXLABackend opens XLA's PJRT plugin for o.Device. The CPU plugin shares host buffers with the device unless
// o.NoSharedBuffers; CUDA never does (weights are copied from host staging buffers).
func newXLABackend(o Options) (backends.Backend, guard.DeviceCaps, error) {
	plugin, err := findPlugin(o.Device)
	if err != nil {
		return nil, guard.DeviceCaps{}, err
	}
	config := plugin
	if o.Device == DeviceCUDA {
		setCUDADataDir(plugin)
	} else if o.NoSharedBuffers {
		config += ",noshared_buffers"
	} else {
		config += ",shared_buffers"
	}
	b, err := xla.New(config)
	if err != nil {
		return nil, guard.DeviceCaps{}, fmt.Errorf("device %s: PJRT plugin %s: %w", o.Device, plugin, err)
	}
	desc := b.DeviceDescription(0)
	caps := guard.DeviceCaps{Name: fmt.Sprintf("%s (%s)", o.Device, desc)}
	if o.Device == DeviceCUDA {
		// go-xla does not expose the device attributes; use the description when it names the capability,
		// else Options.ComputeCapability (0: unknown, so bf16 is not chosen automatically).
		caps.ComputeCapability = o.ComputeCapability
		if m := computeCapabilityRE.FindStringSubmatch(desc); m != nil && caps.ComputeCapability == 0 {
			caps.ComputeCapability, _ = strconv.ParseFloat(m[1], 64)
		}
		if caps.ComputeCapability == 0 {
			slog.Warn("CUDA compute capability unknown: bf16 is not chosen automatically (pass --compute-capability, e.g. 8.0 for an A100, 9.0 for an H100)")
		}
	}
	slog.Info("xla backend", "device", o.Device, "plugin", plugin, "shared_buffers", b.HasSharedBuffers(), "description", desc)
	return b, caps, nil
}
