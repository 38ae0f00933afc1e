#!/usr/bin/env bash
# Builds llama.cpp (the CPU peer) from a source tree you point it at, outside this checkout.
#   benchmarks/peer/build_peer.sh PEER_SRC PEER_BUILD
# PEER_SRC is never modified: the source is copied to PEER_BUILD/src first, and the one
# change the dense side-by-side needs is made there: the llama2.c converter's model memory
# pool (`mem_model_gb`, 2 GB) is raised to 8 GB so a 1B checkpoint fits. A tree whose
# converter lacks that line (or lacks the converter) still builds: the patch is skipped
# with a warning, and the converter target too when its source is absent (the MoE run
# writes its GGUF with benchmarks/peer/hf_to_gguf.py and does not need it). Targets:
# llama-bench, llama-server, llama-quantize, llama-perplexity and llama-tokenize (the quality
# side by side), llama-convert-llama2c-to-ggml (when present);
# CPU Release build with native flags (GGML_NATIVE), no CUDA, no curl, no OpenSSL, no
# web-UI download (the build needs no network).
# The revision recorded in PEER_BUILD/peer_revision.txt is `git rev-parse HEAD` of PEER_SRC,
# or PEER_REVISION from the environment when the tree is not a git checkout (e.g. the
# llama.cpp vendored in a llama-cpp-python source distribution: name its commit there).
set -euo pipefail
if [ "${1:-}" = --help ] || [ "${1:-}" = -h ]; then
  sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'
  exit 0
fi
src=${1:?usage: build_peer.sh PEER_SRC PEER_BUILD}
out=${2:?usage: build_peer.sh PEER_SRC PEER_BUILD}
[ -f "$src/CMakeLists.txt" ] && [ -d "$src/ggml" ] || { echo "build_peer: $src is not a llama.cpp tree" >&2; exit 1; }
mkdir -p "$out"
echo "build_peer: copying $src to $out/src"
rm -rf "$out/src" && mkdir -p "$out/src"
tar -C "$src" --exclude=./.git --exclude='./models/*.gguf' -cf - . | tar -C "$out/src" -xf -
conv="$out/src/examples/convert-llama2c-to-ggml/convert-llama2c-to-ggml.cpp"
targets="llama-bench llama-server llama-quantize llama-perplexity llama-tokenize"
if [ ! -f "$conv" ]; then
  echo "build_peer: warning: no llama2.c converter in this tree ($conv); not building it" >&2
elif grep -q 'params.mem_model_gb *= *2;' "$conv"; then
  sed -i 's/params.mem_model_gb *= *2;/params.mem_model_gb    = 8;/' "$conv"
  targets="$targets llama-convert-llama2c-to-ggml"
else
  echo "build_peer: warning: mem_model_gb default not found in $conv; converter built unpatched" >&2
  targets="$targets llama-convert-llama2c-to-ggml"
fi
rev=$(git -C "$src" rev-parse HEAD 2>/dev/null || echo "${PEER_REVISION:-unknown}")
echo "$rev" > "$out/peer_revision.txt"
echo "build_peer: configuring (revision $rev)"
cmake -S "$out/src" -B "$out/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DGGML_CUDA=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
  -DLLAMA_BUILD_UI=OFF -DLLAMA_BUILD_TESTS=OFF >/dev/null
echo "build_peer: building $targets (a few minutes on 2 cores)"
# shellcheck disable=SC2086
ninja -C "$out/build" $targets
ls "$out/build/bin"
