#!/usr/bin/env bash
# Installs what berth needs, builds it with its tests, and runs every test: unit tests, golden scheduler
# scenarios and the end-to-end tests (real server and agent processes on 127.0.0.1). Then builds again with
# AddressSanitizer + UndefinedBehaviorSanitizer and runs the tests under them.
#   BERTH_SKIP_SANITIZE=1  skips the sanitizer pass.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
jobs=$(nproc)

echo "== build (RelWithDebInfo)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$jobs"
echo "== tests"
(cd build && ctest --output-on-failure -j"$jobs" --timeout 900)

if [ "${BERTH_SKIP_SANITIZE:-0}" != "1" ]; then
  echo "== build (ASan + UBSan)"
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DBERTH_SANITIZE=ON -DBERTH_BUILD_BENCH=OFF >/dev/null
  cmake --build build-asan -j"$jobs"
  echo "== tests under sanitizers"
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  (cd build-asan && ctest --output-on-failure -j"$jobs" --timeout 1500)
fi
echo "== all tests passed"
