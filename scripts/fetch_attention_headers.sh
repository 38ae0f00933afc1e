#!/usr/bin/env bash
# Fetches the header libraries of the CUDA attention candidates (issue 33) from PyPI into the
# cache, never into the checkout: FlashInfer's headers with the CUTLASS/CuTe and CCCL copies
# they are written against (flashinfer-python), and cuDNN's C++ frontend
# (nvidia-cudnn-frontend). Versions and wheel checksums are pinned; CMake finds the folders
# (cmake/Cuda.cmake). Only needed where nvcc exists; run from scripts/setup.sh.
#   TESSERA_CACHE_DIR  cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/tessera)
set -euo pipefail

FLASHINFER_VERSION=0.7.4
FLASHINFER_SHA256=a051a62e09a2738e8b0de47a1944fd2f0f3eff01b728b662141ea660cb09dd32
CUDNN_FRONTEND_VERSION=1.32.0
CUDNN_FRONTEND_SHA256=c6006556017a4d1c914c52a556c71b1267f2d6a0500f742e7b4edef539878df0

ROOT="${TESSERA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera}/third_party"
is_ci() { [ "${CI:-}" = true ] || [ "${CI:-}" = 1 ]; }

# fetch NAME VERSION SHA256 DEST PIP_ARGS... ; unpacks the members a Python filter selects.
fetch() {
  local name=$1 version=$2 sha=$3 dest=$4 filter=$5
  shift 5
  # The marker records what was unpacked, so a changed selection unpacks again.
  [ "$(cat "$dest/.complete" 2>/dev/null)" = "$version $filter" ] && return 0
  echo "setup: fetching $name==$version headers from PyPI"
  local tmp
  tmp=$(mktemp -d)
  if ! python3 -m pip download -q --no-deps "$name==$version" -d "$tmp" "$@"; then
    rm -rf "$tmp"
    return 1
  fi
  local wheel
  wheel=$(ls "$tmp"/*.whl)
  if ! echo "$sha  $wheel" | sha256sum --check --status; then
    echo "setup: $wheel: checksum differs from the pinned $sha" >&2
    rm -rf "$tmp"
    return 1
  fi
  rm -rf "$dest"
  mkdir -p "$dest"
  python3 - "$wheel" "$dest" "$filter" <<'PY'
import os, sys, zipfile
wheel, dest, prefixes = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
with zipfile.ZipFile(wheel) as z:
    for member in z.namelist():
        for prefix in prefixes:
            src, _, dst = prefix.partition("=")
            if member.startswith(src) and not member.endswith("/"):
                target = os.path.join(dest, dst, member[len(src):])
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with z.open(member) as f, open(target, "wb") as out:
                    out.write(f.read())
PY
  echo "$version $filter" >"$dest/.complete"
  rm -rf "$tmp"
}

status=0
# FlashInfer: include/flashinfer, CUTLASS + CuTe (with CUTLASS's util headers), and the CCCL it needs
# (cuda::fast_mod_div is newer than CUDA 13.0's libcu++).
fetch flashinfer-python "$FLASHINFER_VERSION" "$FLASHINFER_SHA256" \
  "$ROOT/flashinfer-$FLASHINFER_VERSION" \
  "flashinfer/data/include/=include/,flashinfer/data/cutlass/include/=cutlass/include/,flashinfer/data/cutlass/tools/util/include/=cutlass/tools/util/include/,flashinfer/data/cccl/libcudacxx/include/=cccl/libcudacxx/include/,flashinfer/data/cccl/cub/=cccl/cub/,flashinfer/data/cccl/thrust/=cccl/thrust/,flashinfer_python-$FLASHINFER_VERSION.dist-info/licenses/=licenses/" ||
  status=1
fetch nvidia-cudnn-frontend "$CUDNN_FRONTEND_VERSION" "$CUDNN_FRONTEND_SHA256" \
  "$ROOT/cudnn-frontend-$CUDNN_FRONTEND_VERSION" \
  "include/=include/,nvidia_cudnn_frontend-$CUDNN_FRONTEND_VERSION.dist-info/licenses/=licenses/" \
  --only-binary=:all: --python-version 3.11 --implementation cp --abi cp311 \
  --platform manylinux_2_28_x86_64 ||
  status=1

if [ "$status" -ne 0 ]; then
  if is_ci; then
    echo "setup: could not fetch the attention headers and CI=true" >&2
    exit 1
  fi
  echo "setup: warning: attention headers missing; the CUDA build keeps Tessera's own kernels only" >&2
fi
echo "setup: attention headers in $ROOT"
