#!/usr/bin/env bash
# The speed ratios of issues 9 and 15 in one run (docs/performance.md): builds bench/speed, creates the synthetic
# TinyLlama-1.1B-shape checkpoint (bf16, split into shards) if it is not cached yet, then measures. Arguments go
# to the program, e.g.
#
#   scripts/speed.sh --quick          # 4 layers, about a minute on an idle 2-core machine
#   scripts/speed.sh                  # all 22 layers (≈ 2.2 GB of shards), under ~10 minutes
#   scripts/speed.sh --shape smollm2-135m --weights f32
#   scripts/speed.sh --json > speed.json
#   scripts/speed.sh moe-llamacpp     # issue 34: a mixture-of-experts GGUF, llama.cpp vs layerstream under one
#                                     # memory limit (scripts/speed_moe_llamacpp.sh --help)
#
# With llama.cpp installed, the same model runs beside layerstream for targets 6, 7 and 9 (never required):
#   LAYERSTREAM_PEER_PYTHON=python-with-llama-cpp-python \
#   LAYERSTREAM_PEER_CONVERT=…/vendor/llama.cpp/convert_hf_to_gguf.py \
#   LAYERSTREAM_PEER_CONVERT_PYTHON=python-with-torch-and-transformers \
#   LAYERSTREAM_PEER_TOKENIZER=a-tokenizer.json-with-the-shape's-vocabulary scripts/speed.sh
#
# Exit status: the program's: 0 all targets met, 1 a target missed (or unmeasurable for lack of an engine
# feature), 2 an error.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = moe-llamacpp ]; then
	shift
	exec scripts/speed_moe_llamacpp.sh "$@"
fi
export CGO_ENABLED=${CGO_ENABLED:-0}
bin_dir="${TMPDIR:-/tmp}/layerstream-speed"
mkdir -p "$bin_dir"
bin="$bin_dir/speed"
go build -o "$bin" ./bench/speed
for arg in "$@"; do
	case "$arg" in -h | -help | --help) exec "$bin" "$@" ;; esac
done
# The model first (creation is not part of any measurement), then the measurement with the same flags.
"$bin" --prepare "$@"
status=0
"$bin" "$@" || status=$?
exit "$status"
