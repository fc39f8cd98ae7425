#!/usr/bin/env bash
# Prepare the GPU check (scripts/gpu-check.sh, issue #38) on this machine: build the x86-64 binary with the xla
# tag (cgo), stripped and xz-compressed, and copy stories260K and its golden outputs from ../shared, into .gpu/
# (ignored by git), which the device tool's `run` carries. Checks that the working tree plus .gpu fit the 64 MiB
# that travel. With --try, runs scripts/gpu-check.sh --device xla-cpu --quick here first (it needs XLA's CPU
# plugin on PJRT_PLUGIN_LIBRARY_PATH: docs/cuda.md).
#
# The test fixtures (gguf/testdata, testdata/hf) leave little of the 64 MiB: --slim takes them out of this
# checkout's working tree with git sparse-checkout (they stay committed; nothing else changes) so that the pack
# fits; `scripts/gpu-pack.sh --restore` (or `git sparse-checkout disable`) puts them back after the device call.
#
#   scripts/gpu-pack.sh [--try] [--slim] | --restore
#
# Then, on the device tool: run(command="scripts/gpu-check.sh --out $OUT", carry=[".gpu"], timeout_s=590).
set -euo pipefail
cd "$(dirname "$0")/.."
shared=../shared
try=0 slim=0
for a in "$@"; do
	case "$a" in
	--try) try=1 ;;
	--slim) slim=1 ;;
	--restore) git sparse-checkout disable; exit 0 ;;
	*) echo "gpu-pack.sh: unknown argument $a" >&2; exit 2 ;;
	esac
done
rm -rf .gpu && mkdir -p .gpu/golden
echo "== building the xla binary (CGO_ENABLED=1 -tags xla, stripped)" >&2
CGO_ENABLED=1 GOARCH=amd64 go build -tags xla -trimpath -ldflags='-s -w' -o .gpu/layerstream-xla ./cmd/layerstream
xz -6 -T0 -f .gpu/layerstream-xla
cp -r "$shared/models/stories260K-hf" .gpu/
cp "$shared/golden/stories260K.generate.json" .gpu/golden/

if ((try)); then
	scripts/gpu-check.sh --device xla-cpu --quick --out /tmp/gpu-check-try
fi
if ((slim)); then
	git sparse-checkout set --no-cone '/*' '!/gguf/testdata/' '!/testdata/hf/'
	echo "== test fixtures out of the working tree; put them back with scripts/gpu-pack.sh --restore" >&2
fi

# What travels: the files of the working tree that git tracks or does not ignore, and .gpu.
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null | awk '{s+=$1} END {print s+0}')
packed=$(du -sb .gpu | cut -f1)
total=$((tree + packed))
printf '== working tree %.1f MiB + .gpu %.1f MiB = %.1f MiB of the 64 MiB that travel\n' \
	"$(echo "$tree / 1048576" | bc -l)" "$(echo "$packed / 1048576" | bc -l)" "$(echo "$total / 1048576" | bc -l)" >&2
if ((total > 64 * 1048576)); then
	echo "too large to travel: the largest tracked folders are" >&2
	git ls-files -z | xargs -0 stat -c '%s %n' | awk '{split($2,a,"/"); s[a[1]"/"a[2]]+=$1} END {for (k in s) printf "%8.1f MiB %s\n", s[k]/1048576, k}' | sort -rn | head -n 5 >&2
	echo "(scripts/gpu-pack.sh --slim takes the test fixtures out of the working tree while the device call runs)" >&2
	exit 1
fi
