#!/usr/bin/env bash
# Fills .gpu-deps/ with what run_gpu_check.sh needs on a GPU machine that has nvcc, CMake and
# ninja but no Debian -dev packages and no network: the .deb files of the libraries a
# TESSERA_GPU_CHECK_ONLY build uses, and a copy of the stories260K test model (the GPU
# machine gets the repository only, not ../shared). Run it here, on Debian 12 with apt;
# then carry .gpu-deps with the device call (benchmarks/gpu/README.md).
#
# Environment:
#   DEPS_DIR     where the files go (default .gpu-deps, ignored by git)
#   STORIES_DIR  the model folder to copy (default $TESSERA_STORIES_DIR or ../shared/models/stories260K)
set -euo pipefail
cd "$(dirname "$0")/../.." || exit 1
DEPS_DIR=${DEPS_DIR:-.gpu-deps}
STORIES_DIR=${STORIES_DIR:-${TESSERA_STORIES_DIR:-../shared/models/stories260K}}
# What the ON-mode build links, and nothing the GPU image already has (libc6, libstdc++6,
# libgcc-s1). libgtest-dev's own dependency, googletest, is only sources: not needed.
# libatomic1: Abseil's CMake targets link -latomic; the check makes the link from it only
# if the image's compiler has none. gpu_bench does not use Google Benchmark.
PACKAGES=(libabsl-dev libabsl20220623 libgtest-dev libgmock-dev nlohmann-json3-dev libatomic1)
LIMIT_MIB=40  # the device call carries 64 MiB in all, the working tree included

die() { printf 'fetch_deps: %s\n' "$*" >&2; exit 1; }

command -v apt-get >/dev/null 2>&1 || die "apt-get not found: run this on Debian 12"
# shellcheck disable=SC1091
. /etc/os-release
[ "${VERSION_CODENAME:-}" = bookworm ] ||
  echo "fetch_deps: warning: this is ${PRETTY_NAME:-an unknown system}, not Debian 12 (bookworm); the project is built and tested against bookworm's versions" >&2

# The installed version where there is one, so the GPU machine builds against exactly what
# this machine builds against; apt's candidate otherwise.
specs=()
for pkg in "${PACKAGES[@]}"; do
  version=$(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null || true)
  if [ -n "$version" ]; then specs+=("$pkg=$version"); else specs+=("$pkg"); fi
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetch_deps: downloading ${specs[*]}"
# apt-get download writes into the current folder; _apt cannot write to a root-owned mktemp
# folder, which only costs a warning.
if ! (cd "$tmp" && apt-get download "${specs[@]}" >"$tmp/apt.log" 2>&1); then
  grep -E '^E:' "$tmp/apt.log" >&2 || cat "$tmp/apt.log" >&2
  die "apt-get download failed (no network, or run 'apt-get update' first)"
fi
count=$(find "$tmp" -maxdepth 1 -name '*.deb' | wc -l)
[ "$count" -eq ${#PACKAGES[@]} ] || die "expected ${#PACKAGES[@]} .deb files, apt-get gave $count"

# Replace the old set so a stale version never sits beside the new one.
mkdir -p "$DEPS_DIR"
rm -f "$DEPS_DIR"/*.deb
mv "$tmp"/*.deb "$DEPS_DIR"/

if [ -f "$STORIES_DIR/model.safetensors" ]; then
  rm -rf "$DEPS_DIR/stories260K"
  mkdir -p "$DEPS_DIR/stories260K"
  cp "$STORIES_DIR"/* "$DEPS_DIR/stories260K/"
  chmod -R u+w "$DEPS_DIR/stories260K"
  echo "fetch_deps: copied the model from $STORIES_DIR"
else
  echo "fetch_deps: warning: no model at $STORIES_DIR; cuda_forward_test will skip on the GPU machine" >&2
fi

for f in "$DEPS_DIR"/*.deb; do
  printf '  %8s  %s\n' "$(du -k "$f" | cut -f1)K" "$(basename "$f")"
done
total_kib=$(du -sk "$DEPS_DIR" | cut -f1)
echo "fetch_deps: $DEPS_DIR holds $((total_kib / 1024)).$(((total_kib % 1024) * 10 / 1024)) MiB"
[ "$total_kib" -le $((LIMIT_MIB * 1024)) ] ||
  die "$DEPS_DIR is over $LIMIT_MIB MiB; the device call carries 64 MiB in all"
