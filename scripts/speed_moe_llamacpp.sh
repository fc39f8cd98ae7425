#!/usr/bin/env bash
# Issue 34's llama.cpp target: a synthetic mixture-of-experts model as one GGUF file (Q4_K_M), decoded by llama.cpp
# (llama-cpp-python, mmap, as it runs by default) and by layerstream (which splits the GGUF into shards on first
# use and streams them) under the same memory limit, smaller than the model; reports both engines' seconds per
# decoded token and their ratio. Goal: llama.cpp's s/token ÷ layerstream's ≥ 5.
#
#   scripts/speed.sh moe-llamacpp                               # qwen3-30b-a3b, 4 layers, limit half the file
#   scripts/speed.sh moe-llamacpp --layers 8 --memory-limit 2G
#   scripts/speed.sh moe-llamacpp --checkpoint DIR              # any checkpoint folder instead of synth's
#   scripts/speed.sh moe-llamacpp --gguf FILE.gguf              # an existing GGUF file
#
# The model: `layerstream synth --shape SHAPE --layers N` (bf16), converted by llama.cpp's convert_hf_to_gguf.py
# and quantized by its llama_model_quantize (scripts/checkpoint_to_gguf.py), kept under $LAYERSTREAM_SPEED_CACHE
# (default $TMPDIR/layerstream-speed). Then, per run, alternating the engines: the file's and the shards' pages
# evicted from the page cache (posix_fadvise DONTNEED: no global cache drop), each engine started in a cgroup
# memory group of the limit (v1 memory.limit_in_bytes or v2 memory.max, the page cache charged to it), an
# 8-token prompt and --new-tokens tokens; the medians over --runs runs.
#
# layerstream needs the limit to hold its stream's buffers (a layer's tensors but its experts, the experts a
# pass routes to) and the head; below that the memory group's OOM killer ends it and the script says so.
# llama.cpp runs with --no-repack (scripts/llamacpp_bench.py): by default it copies its Q4_K matrices, repacked,
# out of the mapped file into its own memory (4.48 GB of the 6.06 GB of a 16-layer Qwen3-30B-A3B shape), so in a
# limit smaller than that it is killed while loading; without, it reads every weight from the mapped file. Each
# run line gives both engines' bytes read from disk (getrusage's ru_inblock: load, prompt and decode) and
# layerstream's per decoded token. llama.cpp's threads spin-wait (OpenMP), so on a busy machine its decode slows
# and swings: the line above the runs prints the load average.
#
# Needs: root or a delegated cgroup (to make the memory group), $LAYERSTREAM_PEER_PYTHON (default
# /work/venvs/llama/bin/python: llama-cpp-python), and for the conversion $TF_PYTHON and $LLAMA_CPP_SRC as
# scripts/checkpoint_to_gguf.py says. Exit status: 0 goal met, 1 missed, 2 an error.
set -euo pipefail
cd "$(dirname "$0")/.."
shape=qwen3-30b-a3b layers=4 checkpoint="" gguf="" limit="" new=8 runs=3 prompt=8 threads=2
while [ $# -gt 0 ]; do
	case "$1" in
	--shape) shape=$2; shift 2 ;;
	--layers) layers=$2; shift 2 ;;
	--checkpoint) checkpoint=$2; shift 2 ;;
	--gguf) gguf=$2; shift 2 ;;
	--memory-limit) limit=$2; shift 2 ;;
	--new-tokens) new=$2; shift 2 ;;
	--runs) runs=$2; shift 2 ;;
	--threads) threads=$2; shift 2 ;;
	-h | --help) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "speed_moe_llamacpp.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
py=${LAYERSTREAM_PEER_PYTHON:-/work/venvs/llama/bin/python}
cache=${LAYERSTREAM_SPEED_CACHE:-${TMPDIR:-/tmp}/layerstream-speed}/moe-$shape-$layers
mkdir -p "$cache"
bin="$cache/layerstream"
CGO_ENABLED=${CGO_ENABLED:-0} go build -o "$bin" ./cmd/layerstream

if [ -z "$gguf" ]; then
	if [ -z "$checkpoint" ]; then
		checkpoint="$cache/checkpoint"
		[ -f "$checkpoint/config.json" ] || "$bin" synth --shape "$shape" --layers "$layers" --out "$checkpoint"
	fi
	gguf="$cache/model-Q4_K_M.gguf"
	[ -f "$gguf" ] || "$py" scripts/checkpoint_to_gguf.py "$checkpoint" "$gguf"
fi
size=$(stat -c %s "$gguf")
# --memory-limit: bytes, or with a K/M/G suffix (powers of 1024); default half the file.
case "$limit" in
"") limit=$((size / 2)) ;;
*[kK]) limit=$((${limit%?} << 10)) ;;
*[mM]) limit=$((${limit%?} << 20)) ;;
*[gG]) limit=$((${limit%?} << 30)) ;;
esac

# layerstream's first-use split, outside the limit and untimed; its log names the shard folder.
shards_file="$cache/shards-of-$(basename "$gguf")"
if [ ! -s "$shards_file" ]; then
	"$bin" bench --model "$gguf" --prompt-tokens "$prompt" --new-tokens 2 --runs 1 --warmup 0 2>&1 >/dev/null |
		sed -n 's/.*first use.* shards=\([^ ]*\).*/\1/p' >"$shards_file"
fi
shard_dir=$(cat "$shards_file")

# The memory group: under this shell's own cgroup (v1 memory controller, or v2).
own=$(awk -F: '$2 == "memory" {print $3}' /proc/self/cgroup)
if [ -n "$own" ] && [ -d "/sys/fs/cgroup/memory$own" ]; then
	cg="/sys/fs/cgroup/memory$own/layerstream-speed-$$"
	mkdir "$cg"
	echo "$limit" >"$cg/memory.limit_in_bytes"
else
	cg="/sys/fs/cgroup$(awk -F: '$1 == "0" {print $3}' /proc/self/cgroup)/layerstream-speed-$$"
	mkdir "$cg"
	echo "$limit" >"$cg/memory.max"
fi
trap 'rmdir "$cg" 2>/dev/null || true' EXIT

# limited CMD...: CMD in the memory group, after the model's pages are evicted from the page cache.
limited() {
	"$py" - "$gguf" ${shard_dir:+"$shard_dir"} <<-'EOF'
		import os, sys
		for root in sys.argv[1:]:
		    paths = [root] if os.path.isfile(root) else [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs]
		    for p in paths:
		        fd = os.open(p, os.O_RDONLY)
		        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
		        os.close(fd)
	EOF
	sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$cg" "$py" -c "$read_bytes_py" "$cache/read-bytes" "$@"
}

# The wrapper limited runs CMD in: CMD's exit status, and the bytes it read from the block device (its
# getrusage ru_inblock: O_DIRECT reads and the page cache's, mmap page faults and readahead included) written to
# the file named first.
read_bytes_py='import resource, subprocess, sys
rc = subprocess.call(sys.argv[2:])
open(sys.argv[1], "w").write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_inblock * 512))
sys.exit(rc)'


# measure NAME CMD...: CMD's s_per_token (its last line of JSON), run limited; an engine that fails under the limit
# (137: killed, most often by the memory group's OOM killer) ends the script.
measure() {
	local name=$1 out status=0
	shift
	out=$(limited "$@" 2>/dev/null) || status=$?
	if [ "$status" -ne 0 ] || [ -z "$out" ]; then
		echo "speed_moe_llamacpp.sh: $name failed under the $((limit >> 20)) MiB limit (exit $status; 137: killed, e.g. out of memory): raise --memory-limit" >&2
		exit 2
	fi
	printf '%s' "$out" | field s_per_token
	printf '%s' "$out" >"$cache/last.json"
}

# read_mb: the megabytes the last measured run read from disk (load, prompt and decode).
read_mb() { awk '{printf "%.0f", $1 / 1e6}' "$cache/read-bytes"; }

median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
field() { "$py" -c 'import json, sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])[sys.argv[1]])' "$1"; }

echo "model: $gguf ($((size >> 20)) MiB), memory limit $((limit >> 20)) MiB, $prompt-token prompt, $new new tokens, $runs runs, $threads threads, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
ls_runs="" lc_runs=""
for r in $(seq "$runs"); do
	ls=$(measure layerstream "$bin" bench --model "$gguf" --prompt-tokens "$prompt" --new-tokens "$new" --runs 1 --warmup 0 --json)
	ls_mb=$(read_mb) ls_tok=$(field read_bytes_per_token <"$cache/last.json")
	lc=$(measure llama.cpp "$py" scripts/llamacpp_bench.py "$gguf" --prompt-tokens "$prompt" --new-tokens "$new" --runs 1 --threads "$threads" --no-repack --json)
	echo "run $r: layerstream $ls s/token ($ls_mb MB read in all, $((${ls_tok%.*} >> 20)) MiB a decoded token), llama.cpp $lc s/token ($(read_mb) MB read in all)" >&2
	ls_runs="$ls_runs$ls"$'\n' lc_runs="$lc_runs$lc"$'\n'
done
ls_med=$(printf '%s' "$ls_runs" | median)
lc_med=$(printf '%s' "$lc_runs" | median)
ratio=$(awk -v a="$lc_med" -v b="$ls_med" 'BEGIN {printf "%.2f", a / b}')
echo "target: llama.cpp s/token ÷ layerstream s/token under the same memory limit ≥ 5"
echo "  layerstream $ls_med s/token, llama.cpp $lc_med s/token (medians of $runs): ratio $ratio"
awk -v r="$ratio" 'BEGIN {exit !(r >= 5)}' && { echo "  met"; exit 0; }
echo "  MISSED"
exit 1
