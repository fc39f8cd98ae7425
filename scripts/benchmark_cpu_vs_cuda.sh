#!/usr/bin/env bash
# Benchmark the same model and prompt on every available backend: CPU always (the pure-Go build); XLA's CPU plugin
# (xla-cpu) when pjrt_c_api_cpu_plugin.so is on PJRT_PLUGIN_LIBRARY_PATH; CUDA when this machine has an NVIDIA GPU
# and a PJRT CUDA plugin. The XLA backends need a binary built with the xla build tag (cgo). Prints one table with
# the medians of each backend and each one's ratio to CPU; a backend that cannot run is listed as "skipped: why".
#
# Defaults to a small synthetic model (SmolLM2-135M shape, 4 layers) so it runs anywhere in a few minutes.
#
#   scripts/benchmark_cpu_vs_cuda.sh [--model DIR] [--runs R] [--prompt-tokens N] [--new-tokens M]
#                                    [--shape NAME --layers L] [--work DIR] [--bin PATH] [-- extra bench flags]
#
# --bin PATH runs a binary built with -tags xla (CGO_ENABLED=1) for every backend instead of building two: for a
# machine without a Go toolchain (the GPU check, scripts/gpu-check.sh).
#
# Environment: PJRT_PLUGIN_LIBRARY_PATH (folders with pjrt_c_api_cpu_plugin.so / pjrt_c_api_cuda_plugin.so),
# XLA_FLAGS (passed through). docs/cuda.md says where the plugins come from.
set -euo pipefail
cd "$(dirname "$0")/.."

model="" runs=3 prompt_tokens=64 new_tokens=16 shape=smollm2-135m layers=4 work="" bin=""
extra=()
while (($#)); do
	case "$1" in
	--model) model=$2; shift 2 ;;
	--runs) runs=$2; shift 2 ;;
	--prompt-tokens) prompt_tokens=$2; shift 2 ;;
	--new-tokens) new_tokens=$2; shift 2 ;;
	--shape) shape=$2; shift 2 ;;
	--layers) layers=$2; shift 2 ;;
	--work) work=$2; shift 2 ;;
	--bin) bin=$(realpath "$2"); shift 2 ;;
	--) shift; extra=("$@"); break ;;
	-h | --help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "benchmark_cpu_vs_cuda.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
if [[ -z $work ]]; then
	work=$(mktemp -d -t layerstream-bench.XXXXXX)
	trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work"

log() { echo "== $*" >&2; }

if [[ -n $bin ]]; then
	ln -sf "$bin" "$work/layerstream"
	ln -sf "$bin" "$work/layerstream-xla"
else
	log "building the CPU binary (CGO_ENABLED=0)"
	CGO_ENABLED=0 go build -o "$work/layerstream" ./cmd/layerstream
fi

if [[ -z $model ]]; then
	model=$work/model
	log "writing a synthetic $shape checkpoint with $layers layers into $model"
	"$work/layerstream" synth --shape "$shape" --layers "$layers" --out "$model"
fi

bench_flags=(--model "$model" --prompt-tokens "$prompt_tokens" --new-tokens "$new_tokens" --runs "$runs" --json
	"${extra[@]}")

# field FILE NAME: a top-level number from bench's JSON (the medians come before the per-run list).
field() { grep -o "\"$2\":[-0-9.eE+]*" "$1" | head -n1 | cut -d: -f2; }

declare -A skipped
run_backend() { # run_backend NAME BINARY DEVICE
	log "bench on $1: ${bench_flags[*]}"
	if ! "$2" bench --device "$3" "${bench_flags[@]}" >"$work/$1.json" 2>"$work/$1.log"; then
		skipped[$1]="bench failed: $(grep -v '^time=' "$work/$1.log" | tail -n1)"
		log "$1: ${skipped[$1]}"
		return
	fi
}

run_backend cpu "$work/layerstream" cpu

# build_xla: the xla binary, built once; false (with the reason in $xla_error) when it does not build.
xla_error=""
build_xla() {
	[[ -x $work/layerstream-xla ]] && return 0
	[[ -n $xla_error ]] && return 1
	log "building the xla binary (CGO_ENABLED=1, -tags xla)"
	if ! CGO_ENABLED=1 go build -tags xla -o "$work/layerstream-xla" ./cmd/layerstream 2>"$work/build-xla.log"; then
		xla_error="go build -tags xla failed: $(head -n1 "$work/build-xla.log")"
		return 1
	fi
}

# xla-cpu: XLA's CPU plugin runs the code path CUDA takes, on this machine's cores.
cpu_plugin=""
IFS=: read -ra dirs <<<"${PJRT_PLUGIN_LIBRARY_PATH:-}"
for d in "${dirs[@]}"; do
	[[ -n $d && -f $d/pjrt_c_api_cpu_plugin.so ]] && { cpu_plugin=$d/pjrt_c_api_cpu_plugin.so; break; }
done
if [[ -z $cpu_plugin ]]; then
	skipped[xla-cpu]="no pjrt_c_api_cpu_plugin.so on PJRT_PLUGIN_LIBRARY_PATH (docs/cuda.md)"
elif ! build_xla; then
	skipped[xla-cpu]=$xla_error
else
	run_backend xla-cpu "$work/layerstream-xla" xla-cpu
fi

# CUDA: a GPU, a PJRT plugin and an xla build.
find_plugin() {
	local d f
	IFS=: read -ra dirs <<<"${PJRT_PLUGIN_LIBRARY_PATH:-}"
	for d in "${dirs[@]}"; do
		[[ -n $d && -f $d/pjrt_c_api_cuda_plugin.so ]] && { echo "$d/pjrt_c_api_cuda_plugin.so"; return; }
	done
	# The JAX CUDA plugin wheel (jax-cuda12-pjrt / jax-cuda13-pjrt) ships xla_cuda_plugin.so.
	for f in /usr/local/lib/python3*/dist-packages/jax_plugins/xla_cuda*/xla_cuda_plugin.so \
		/usr/lib/python3*/site-packages/jax_plugins/xla_cuda*/xla_cuda_plugin.so \
		"$HOME"/.local/lib/python3*/site-packages/jax_plugins/xla_cuda*/xla_cuda_plugin.so \
		/usr/local/lib/python3*/site-packages/jax_plugins/xla_cuda*/xla_cuda_plugin.so; do
		[[ -f $f ]] && { echo "$f"; return; }
	done
	if command -v python3 >/dev/null; then
		python3 - <<'EOF' 2>/dev/null || true
import glob, site, sys
for d in site.getsitepackages() + [site.getusersitepackages()]:
    for f in glob.glob(d + "/jax_plugins/xla_cuda*/xla_cuda_plugin.so"):
        print(f); sys.exit(0)
EOF
	fi
}

if ! command -v nvidia-smi >/dev/null; then
	skipped[cuda]="no NVIDIA GPU (nvidia-smi not found)"
elif ! nvidia-smi -L >/dev/null 2>&1; then
	skipped[cuda]="no NVIDIA GPU (nvidia-smi -L failed)"
else
	plugin=$(find_plugin)
	if [[ -z $plugin ]]; then
		skipped[cuda]="no PJRT CUDA plugin (set PJRT_PLUGIN_LIBRARY_PATH to a folder with pjrt_c_api_cuda_plugin.so, or install the jax-cuda12-pjrt/jax-cuda13-pjrt wheel)"
	else
		# GoMLX finds plugins named pjrt_c_api_<name>_plugin.so on PJRT_PLUGIN_LIBRARY_PATH.
		mkdir -p "$work/pjrt"
		ln -sf "$plugin" "$work/pjrt/pjrt_c_api_cuda_plugin.so"
		export PJRT_PLUGIN_LIBRARY_PATH=$work/pjrt${PJRT_PLUGIN_LIBRARY_PATH:+:$PJRT_PLUGIN_LIBRARY_PATH}
		# The engine sets XLA_FLAGS' CUDA data folder itself when unset (docs/cuda.md) and never downloads.
		log "PJRT CUDA plugin $plugin"
		if ! build_xla; then
			skipped[cuda]=$xla_error
		else
			run_backend cuda "$work/layerstream-xla" cuda
		fi
	fi
fi

# The table.
cols=(prefill_tok_s decode_tok_s s_per_token ttft_s total_s peak_rss_bytes)
printf '\nmodel %s, prompt %s tokens, %s new tokens, median of %s runs\n' "$model" "$prompt_tokens" "$new_tokens" "$runs"
printf '%-10s %14s %13s %10s %9s %9s %12s\n' backend "prefill tok/s" "decode tok/s" "s/token" "TTFT s" "total s" "peak RSS MB"
declare -A val
for b in cpu xla-cpu cuda; do
	if [[ -n ${skipped[$b]:-} ]]; then
		printf '%-10s skipped: %s\n' "$b" "${skipped[$b]}"
		continue
	fi
	for c in "${cols[@]}"; do val[$b.$c]=$(field "$work/$b.json" "$c"); done
	printf '%-10s %14.1f %13.2f %10.4f %9.3f %9.3f %12.1f\n' "$b" "${val[$b.prefill_tok_s]}" "${val[$b.decode_tok_s]}" \
		"${val[$b.s_per_token]}" "${val[$b.ttft_s]}" "${val[$b.total_s]}" \
		"$(awk -v b="${val[$b.peak_rss_bytes]}" 'BEGIN{print b/1e6}')"
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (b > 0) printf "%.2fx", a/b; else print "-" }'; }
for b in xla-cpu cuda; do
	[[ -n ${skipped[cpu]:-} || -n ${skipped[$b]:-} ]] && continue
	# For rates higher is better, for times lower is better: the ratio is the backend over CPU either way.
	printf '%-10s %14s %13s %10s %9s %9s\n' "$b/cpu" \
		"$(ratio "${val[$b.prefill_tok_s]}" "${val[cpu.prefill_tok_s]}")" \
		"$(ratio "${val[$b.decode_tok_s]}" "${val[cpu.decode_tok_s]}")" \
		"$(ratio "${val[$b.s_per_token]}" "${val[cpu.s_per_token]}")" \
		"$(ratio "${val[$b.ttft_s]}" "${val[cpu.ttft_s]}")" \
		"$(ratio "${val[$b.total_s]}" "${val[cpu.total_s]}")"
done
[[ -z ${skipped[cpu]:-} ]] # the CPU run must work: exit non-zero when it did not
