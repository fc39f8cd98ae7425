#!/usr/bin/env bash
# The project's test command (README): vet, the whole test suite, and short fuzzing runs of every parser of
# untrusted bytes. Works on a fresh machine with Go installed: modules download on first use.
set -euo pipefail
cd "$(dirname "$0")/.."
export CGO_ENABLED=${CGO_ENABLED:-0}
go vet ./...
go test -count=1 -timeout 20m ./...
# Short fuzzing runs (the seed corpora already ran above as plain tests).
fuzztime=${FUZZTIME:-10s}
for target in $(grep -rhoE --include='*_test.go' '^func Fuzz[A-Za-z0-9_]+' . | sed 's/^func //' | sort -u); do
	pkg=$(grep -rlE --include='*_test.go' "^func ${target}\(" . | head -n1 | xargs dirname)
	echo "fuzz ${target} (${pkg}, ${fuzztime})"
	go test -run='^$' -fuzz="^${target}\$" -fuzztime="${fuzztime}" "${pkg}"
done
