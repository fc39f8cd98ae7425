// Package hffixture gives tests the tiny checkpoints and reference outputs that transformers itself made
// (testdata/hf/<name>/, written by scripts/fixtures/make_hf_fixtures.py; see testdata/hf/README.md).
//
// Each fixture folder holds config.json (transformers 5 spelling), config.v4.json (the same model saved by
// transformers 4.57: top-level rope_theta/rope_scaling, torch_dtype), model.safetensors (f32, shared by both
// spellings), generation_config.json where transformers wrote one, and reference.safetensors with input_ids
// (int64 [40]), logits (f32 [40, vocab]) and greedy_ids (int64 [20]).
package hffixture

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

// Spellings of config.json a fixture carries.
const (
	V5 = "v5" // config.json as transformers 5 saves it (rope_parameters, dtype)
	V4 = "v4" // config.v4.json as transformers 4.57 saves it (rope_theta, rope_scaling, torch_dtype)
)

// Spellings lists both config spellings, for table-driven tests.
var Spellings = []string{V5, V4}

// ReferenceFile is the name of the reference-output file inside a fixture folder; it is never copied into a
// checkpoint made by Checkpoint (an engine would take it for a weight file).
const ReferenceFile = "reference.safetensors"

// configFiles maps a spelling to the file that holds it.
var configFiles = map[string]string{V5: "config.json", V4: "config.v4.json"}

// notCheckpoint are the files of a fixture folder that Checkpoint leaves out.
var notCheckpoint = []string{ReferenceFile, "config.json", "config.v4.json", "README.md", "keys.json"}

var (
	rootOnce sync.Once
	rootDir  string
	rootErr  error
)

// ModuleRoot returns the folder holding the module's go.mod, found by walking up from the working directory (a
// test runs in its package's folder, so this works from any package).
func ModuleRoot() (string, error) {
	rootOnce.Do(func() {
		dir, err := os.Getwd()
		if err != nil {
			rootErr = fmt.Errorf("hffixture: working directory: %w", err)
			return
		}
		for {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				rootDir = dir
				return
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				rootErr = errors.New("hffixture: no go.mod found above the working directory")
				return
			}
			dir = parent
		}
	})
	return rootDir, rootErr
}

// Testdata returns the absolute path of testdata/<elem...> under the module root.
func Testdata(elem ...string) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(append([]string{root, "testdata"}, elem...)...), nil
}

// Dir returns the folder of the named fixture (testdata/hf/<name>).
func Dir(name string) (string, error) {
	if name == "" || name != filepath.Base(name) || name == "." || name == ".." {
		return "", fmt.Errorf("hffixture: bad fixture name %q", name)
	}
	dir, err := Testdata("hf", name)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(dir, ReferenceFile)); err != nil {
		return "", fmt.Errorf("hffixture: fixture %q: %w (known: %v)", name, err, Names())
	}
	return dir, nil
}

// Names lists the fixtures (folders of testdata/hf holding a reference.safetensors), sorted. It returns nil when
// testdata/hf cannot be found.
func Names() []string {
	dir, err := Testdata("hf")
	if err != nil {
		return nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, e.Name(), ReferenceFile)); err == nil {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	return names
}

// HasSpelling reports whether the named fixture has a config in spelling: transformers 4.57 has no class for the
// newest families, whose fixtures have only the transformers-5 config (manifest.json's no_v4).
func HasSpelling(name, spelling string) bool {
	dir, err := Dir(name)
	if err != nil {
		return false
	}
	_, err = os.Stat(filepath.Join(dir, configFiles[spelling]))
	return err == nil
}

// Checkpoint makes a checkpoint folder for the named fixture in a fresh t.TempDir(): the chosen spelling's config
// as config.json, and copies of model.safetensors, generation_config.json and any other checkpoint file of the
// fixture (never reference.safetensors). It fails the test on any error.
func Checkpoint(t testing.TB, name, spelling string) string {
	t.Helper()
	dir, err := CheckpointIn(t.TempDir(), name, spelling)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// CheckpointIn is Checkpoint writing into an existing folder dst; it returns dst.
func CheckpointIn(dst, name, spelling string) (string, error) {
	cfg, ok := configFiles[spelling]
	if !ok {
		return "", fmt.Errorf("hffixture: unknown spelling %q (want %q or %q)", spelling, V5, V4)
	}
	src, err := Dir(name)
	if err != nil {
		return "", err
	}
	if err := copyFile(filepath.Join(src, cfg), filepath.Join(dst, "config.json")); err != nil {
		return "", err
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return "", fmt.Errorf("hffixture: %w", err)
	}
	for _, e := range entries {
		if e.IsDir() || slices.Contains(notCheckpoint, e.Name()) {
			continue
		}
		if err := copyFile(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
			return "", err
		}
	}
	return dst, nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("hffixture: %w", err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return fmt.Errorf("hffixture: %w", err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("hffixture: copying %s: %w", src, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("hffixture: %w", err)
	}
	return nil
}
