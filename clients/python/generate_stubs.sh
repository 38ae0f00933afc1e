#!/usr/bin/env bash
# Generates the Python protobuf + gRPC modules of Tessera's public API into OUT_DIR:
#   OUT_DIR/tessera/v1/generation_pb2.py, OUT_DIR/tessera/v1/generation_pb2_grpc.py
# Put OUT_DIR on sys.path (tessera_client.py does it with --stubs). The health service is
# called without generated code: its Python package name ("grpc") would shadow grpcio.
# Needs protoc and grpc_python_plugin (Debian: protobuf-compiler, protobuf-compiler-grpc).
set -euo pipefail
if [[ $# -lt 1 ]]; then
  echo "usage: $0 OUT_DIR" >&2
  exit 2
fi
OUT_DIR=$1
PROTO_DIR="$(cd "$(dirname "$0")/../../proto" && pwd)"
PLUGIN=$(command -v grpc_python_plugin || true)
if [[ -z "$PLUGIN" ]]; then
  echo "$0: grpc_python_plugin not found on PATH (Debian package protobuf-compiler-grpc)" >&2
  exit 1
fi
mkdir -p "$OUT_DIR"
protoc -I "$PROTO_DIR" --python_out="$OUT_DIR" --grpc_out="$OUT_DIR" \
  --plugin=protoc-gen-grpc="$PLUGIN" tessera/v1/generation.proto
# Namespace packages would also work; plain __init__.py files keep older tools happy.
touch "$OUT_DIR/tessera/__init__.py" "$OUT_DIR/tessera/v1/__init__.py"
