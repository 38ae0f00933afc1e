#!/usr/bin/env bash
# Builds llama.cpp (the CPU peer) from a source tree you point it at, outside this checkout.
#   benchmarks/peer/build_peer.sh PEER_SRC PEER_BUILD
# PEER_SRC is never modified: the source is copied to PEER_BUILD/src first, and the one
# change the side-by-side needs is made there: the llama2.c converter's model memory pool
# (`mem_model_gb`, 2 GB) is raised to 8 GB so a 1B checkpoint fits. Targets: llama-bench,
# llama-server, llama-convert-llama2c-to-ggml, llama-quantize; CPU Release build with
# native flags (GGML_NATIVE), no CUDA, no curl.
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
grep -q 'params.mem_model_gb *= *2;' "$conv" || { echo "build_peer: mem_model_gb default not found in $conv" >&2; exit 1; }
sed -i 's/params.mem_model_gb *= *2;/params.mem_model_gb    = 8;/' "$conv"
rev=$(git -C "$src" rev-parse HEAD 2>/dev/null || echo unknown)
echo "$rev" > "$out/peer_revision.txt"
echo "build_peer: configuring (revision $rev)"
cmake -S "$out/src" -B "$out/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DGGML_CUDA=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF >/dev/null
echo "build_peer: building (a few minutes on 2 cores)"
ninja -C "$out/build" llama-bench llama-server llama-convert-llama2c-to-ggml llama-quantize
ls "$out/build/bin"
