#!/usr/bin/env bash
# Quick start: installs what berth needs (Debian packages), builds it, starts the embedded local cluster
# (one node declaring 4 V100 GPUs) and runs an example job on it.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
source scripts/configure.sh
berth_configure build -DCMAKE_BUILD_TYPE=Release -DBERTH_BUILD_TESTS=OFF -DBERTH_BUILD_BENCH=OFF \
  -DBERTH_LINE_TABLES_ONLY=OFF
cmake --build build --target berth -j"$(nproc)"

berth=build/src/berth
"$berth" local up --gpus V100:4
echo
echo "+ berth exec examples/hello.yaml"
"$berth" exec examples/hello.yaml
echo
echo "+ berth queue"
"$berth" queue
echo
echo "berth is at $berth; the local cluster keeps running (stop it with: $berth local down)."
