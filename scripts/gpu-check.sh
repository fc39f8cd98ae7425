#!/usr/bin/env bash
# The GPU check of issue #38, run in one call on a lent GPU machine (no Go toolchain there): it writes its figures,
# logs and pictures into one output folder ($OUT, or --out), each step under a time limit, and a summary.md of
# what passed, failed or was skipped and why. Prepare the binary and inputs here first with scripts/gpu-pack.sh,
# which also tries this script end to end on XLA's CPU plugin (--device xla-cpu --quick).
#
#   scripts/gpu-check.sh [--device cuda|xla-cpu] [--pack DIR] [--out DIR] [--quick] [--steps 1,2,3,4,5]
#
# Steps (docs/cuda.md, "Checked on a GPU", says what each shows):
#   1. --device opens; stories260K reproduces llama2.c's golden ids, and its logits are within 1e-4 of the float64
#      reference (verify).
#   2. A synthetic SmolLM2-135M-shape f32 checkpoint (30 layers) against transformers on the same GPU: logits in f32
#      and bf16, greedy ids, decode tokens/s of both. (Real weights do not fit the 64 MiB that travels to the GPU
#      machine: the shape is real, the weights random.)
#   3. A synthetic Llama-2-7B-shape bf16 checkpoint streamed with --device-budget 4GiB: s/token, the profiler's
#      table and timeline, and the host→device copy rate of the bus (torch, pageable and pinned) in the same run.
#   4. Prefill of 2,048 tokens (TinyLlama-1.1B shape) on the GPU against the same on the CPU.
#   5. scripts/benchmark_cpu_vs_cuda.sh's table.
# --quick shrinks every model to a few layers and the prompts (for the xla-cpu trial on 2 cores); --steps runs
# only the listed steps (a rerun of what a first call could not finish).
set -uo pipefail
cd "$(dirname "$0")/.."

device=cuda pack=.gpu out=${OUT:-/tmp/gpu-check} quick=0 steps=1,2,3,4,5
while (($#)); do
	case "$1" in
	--device) device=$2; shift 2 ;;
	--pack) pack=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	--quick) quick=1; shift ;;
	--steps) steps=$2; shift 2 ;;
	-h | --help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "gpu-check.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
mkdir -p "$out"
if [[ -n ${GPU_CHECK_WORK:-} ]]; then # kept: the synthetic checkpoints, references and shards
	work=$GPU_CHECK_WORK
	mkdir -p "$work"
else
	work=$(mktemp -d -t gpu-check.XXXXXX)
	trap 'rm -rf "$work"' EXIT
fi
summary=$out/summary.md
# The device tool brings back at most 8 files: the summary, the profile and timeline of step 3, and logs.tar,
# to which every step's log is appended as it ends (what a killed run leaves is still there).
logs=$work/logs
mkdir -p "$logs"
keep() { tar -rf "$out/logs.tar" -C "$logs" "$@" 2>/dev/null; }
start=$(date +%s)
wanted() { [[ ,$steps, == *,$1,* ]]; }
echo "# GPU check ($device, $(date -u +%FT%TZ))" >"$summary"
rm -f "$out/logs.tar"

note() { echo "$*" | tee -a "$summary"; }
# step NAME SECONDS CMD...: runs CMD under a time limit with its output in $logs/NAME.log (kept in logs.tar);
# records the outcome.
step() {
	local name=$1 limit=$2
	shift 2
	local t0=$(date +%s)
	echo "== $name (limit ${limit}s)" >&2
	timeout --kill-after=10 "$limit" "$@" >"$logs/$name.log" 2>&1
	local rc=$? took=$(($(date +%s) - t0))
	keep "$name.log"
	if ((rc == 0)); then
		note "- $name: ok (${took}s)"
	elif ((rc == 124 || rc == 137)); then
		note "- $name: **timed out** after ${took}s (log: $name.log)"
	else
		note "- $name: **failed**, status $rc (${took}s): $(grep -v '^time=' "$logs/$name.log" | tail -n 1)"
	fi
	return $rc
}

# --- setup: the binary, the plugin, the machine ---
bin=$work/layerstream
if [[ -f $pack/layerstream-xla.xz ]]; then
	xz -dc "$pack/layerstream-xla.xz" >"$bin" && chmod +x "$bin"
elif [[ -x $pack/layerstream-xla ]]; then
	cp "$pack/layerstream-xla" "$bin"
else
	note "no binary in $pack (run scripts/gpu-pack.sh first)"
	exit 1
fi
{
	echo "## machine"
	uname -a
	nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.max,pcie.link.width.max --format=csv 2>&1 || true
	nproc
	free -g | head -n 2
	python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' 2>&1
} >"$logs/machine.txt" 2>&1
keep machine.txt
if [[ $device == cuda ]]; then
	plugin=$(python3 -c 'import glob, site; print(next(iter(glob.glob(site.getsitepackages()[0] + "/jax_plugins/xla_cuda*/xla_cuda_plugin.so")), ""))' 2>/dev/null)
	[[ -z $plugin ]] && plugin=$(ls /usr/local/lib/python3*/*-packages/jax_plugins/xla_cuda*/xla_cuda_plugin.so 2>/dev/null | head -n 1)
	if [[ -z $plugin ]]; then
		note "no PJRT CUDA plugin (jax_plugins/xla_cuda*/xla_cuda_plugin.so) found"
		exit 1
	fi
	mkdir -p "$work/pjrt" && ln -sf "$plugin" "$work/pjrt/pjrt_c_api_cuda_plugin.so"
	export PJRT_PLUGIN_LIBRARY_PATH=$work/pjrt${PJRT_PLUGIN_LIBRARY_PATH:+:$PJRT_PLUGIN_LIBRARY_PATH}
	dev=(--device cuda --compute-capability 9.0)
	torch_device=cuda
else
	dev=(--device "$device")
	torch_device=cpu
fi
note "binary: $("$bin" --version 2>&1 | head -n 1); plugin path: ${PJRT_PLUGIN_LIBRARY_PATH:-unset}"
export LAYERSTREAM_CACHE=$work/cache
ls=("$bin")

# --- 1. stories260K: golden ids and logits ---
golden=$pack/golden/stories260K.generate.json
stories=$pack/stories260K-hf
if wanted 1 && [[ -d $stories && -f $golden ]]; then
	ids=$(python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["cases"][0]; print(",".join(map(str,c["prompt_ids"])))' "$golden")
	step 1-stories-verify 120 "${ls[@]}" verify -q "${dev[@]}" --dtype f32 --model "$stories" --ids "$ids"
	steps=$(python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["cases"][0]; print(len(c["generated_ids"]))' "$golden")
	if step 1-stories-generate 120 "${ls[@]}" generate -q "${dev[@]}" --dtype f32 --model "$stories" --ids "$ids" \
		--temperature 0 --max-new-tokens "$steps" --json; then
		python3 - "$golden" "$logs/1-stories-generate.log" <<'EOF' | tee -a "$summary"
import json, sys
want = json.load(open(sys.argv[1]))["cases"][0]["generated_ids"]
got = None
for line in open(sys.argv[2]):
    if line.startswith("{"):
        got = json.loads(line).get("generated_ids")
got = got or []
n = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
print(f"  - golden ids (llama2.c): {'equal' if got == want else 'DIFFER'}: the first {n} of {len(want)} equal")
EOF
	fi
elif wanted 1; then
	note "- 1: skipped: $stories or $golden missing (scripts/gpu-pack.sh copies them)"
fi

# --- 2. SmolLM2-135M shape against transformers ---
layers=30 ptok=40
((quick)) && layers=4
small=$work/smollm2
if wanted 2 && step 2-synth 120 "${ls[@]}" synth -q --shape smollm2-135m --layers "$layers" --dtype f32 --out "$small"; then
	for dt in float32 bfloat16; do
		short=${dt/float32/f32}
		short=${short/bfloat16/bf16}
		step "2-transformers-$short" 180 python3 scripts/gpu_reference.py --model "$small" --device "$torch_device" \
			--dtype "$dt" --out "$work/ref-$short.safetensors" --json "$logs/2-transformers-$short.json" || continue
		keep "2-transformers-$short.json"
		step "2-verify-$short" 180 "${ls[@]}" verify "${dev[@]}" --dtype "$short" --model "$small" \
			--reference "$work/ref-$short.safetensors" --decode-steps 4
		step "2-bench-$short" 180 "${ls[@]}" bench -q "${dev[@]}" --dtype "$short" --model "$small" --resident \
			--prompt-tokens "$ptok" --new-tokens 64 --runs 3 --json
		python3 - "$logs/2-transformers-$short.json" "$logs/2-bench-$short.log" "$short" <<'EOF' | tee -a "$summary"
import json, sys
t = json.load(open(sys.argv[1]))
b = next((json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")), {})
print(f"  - {sys.argv[3]} decode tokens/s: layerstream {b.get('decode_tok_s', float('nan')):.1f}, transformers {t['decode_tokens_per_s']:.1f}")
EOF
	done
fi

# --- 3. Llama-2-7B shape, bf16, streamed through a 4 GiB device budget ---
layers=32 budget=4GiB
((quick)) && layers=4 budget=2GiB # xla-cpu computes in f32: a layer is 0.8 GB there
big=$work/llama2-7b
if wanted 3 && [[ $device == cuda ]]; then
	step 3-copy-rate 60 python3 scripts/gpu_copy_rate.py --mib 1024
fi
if wanted 3 && step 3-synth 200 "${ls[@]}" synth -q --shape llama2-7b --layers "$layers" --out "$big"; then
	# The first run splits the checkpoint into shards and warms the page cache; the second is measured.
	step 3-split 200 "${ls[@]}" bench -q "${dev[@]}" --model "$big" --prompt-tokens 8 --new-tokens 1 --runs 1 --warmup 0
	step 3-stream 240 "${ls[@]}" bench -q "${dev[@]}" --model "$big" --device-budget "$budget" --prompt-tokens 16 \
		--new-tokens 8 --runs 1 --json --profile --profile-out "$out/3-profile.parquet" --profile-timeline "$out/3-timeline.svg"
	python3 - "$logs/3-stream.log" "$logs/3-copy-rate.log" <<'EOF' | tee -a "$summary"
import json, sys
b = next((json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")), None)
try:
    c = next(json.loads(l) for l in open(sys.argv[2]) if l.startswith("{"))
except (OSError, StopIteration):
    c = None
if b:
    per = b.get("streamed_bytes", 0) / max(b.get("tokens_per_pass", 1), 1)
    line = f"  - streamed: {b['s_per_token']:.3f} s/token, {per/1e9:.2f} GB of layers per token"
    if c:
        bound = per / (c["pinned_GBps"] * 1e9)
        line += (f"; bus {c['pageable_GBps']:.1f} GB/s pageable, {c['pinned_GBps']:.1f} GB/s pinned: "
                 f"host→device bound {bound:.3f} s/token, ratio {b['s_per_token']/bound:.2f} (goal ≤ 1.3)")
    print(line)
EOF
fi

# --- 4. prefill of 2,048 tokens, GPU against CPU ---
layers=22 ptok=2048
((quick)) && layers=2 ptok=256
mid=$work/tinyllama
if wanted 4 && step 4-synth 120 "${ls[@]}" synth -q --shape tinyllama-1.1b --layers "$layers" --out "$mid"; then
	step 4-prefill-gpu 180 "${ls[@]}" bench -q "${dev[@]}" --model "$mid" --resident --prompt-tokens "$ptok" --new-tokens 1 --runs 2 --json
	step 4-prefill-cpu 180 "${ls[@]}" bench -q --device cpu --model "$mid" --resident --prompt-tokens "$ptok" --new-tokens 1 --runs 2 --json
	python3 - "$logs/4-prefill-gpu.log" "$logs/4-prefill-cpu.log" "$ptok" <<'EOF' | tee -a "$summary"
import json, sys
def rate(p):
    try:
        return next(json.loads(l) for l in open(p) if l.startswith("{"))["prefill_tok_s"]
    except (OSError, StopIteration, KeyError):
        return float("nan")
g, c = rate(sys.argv[1]), rate(sys.argv[2])
print(f"  - prefill of {sys.argv[3]} tokens: {g:.0f} tokens/s on the device, {c:.0f} on the CPU ({g/c:.1f}×)")
EOF
fi

# --- 5. the CPU/XLA/CUDA benchmark table ---
if wanted 5 && step 5-benchmark 180 scripts/benchmark_cpu_vs_cuda.sh --bin "$bin" --runs 2 --work "$work/bench5"; then
	sed -n '/^model /,$p' "$logs/5-benchmark.log" | sed 's/^/    /' >>"$summary"
fi

note "total: $(($(date +%s) - start))s"
cat "$summary"
