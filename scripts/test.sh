#!/usr/bin/env bash
# Installs what berth needs, builds it with its tests, and runs every test: unit tests, golden
# scheduler scenarios and the end-to-end tests (real server and agent processes on 127.0.0.1):
#   - checks the formatting of every C++ file (clang-format --dry-run --Werror) and the code's shape
#     (scripts/check_shape.py);
#   - checks that every header compiles on its own (the unity builds would hide a missing include,
#     which breaks a file-by-file build, the edit-compile loop the README suggests);
#   - checks the lock annotations with clang (-Wthread-safety as errors) on the modules that have them;
#   - builds with AddressSanitizer + UndefinedBehaviorSanitizer (unoptimised) and runs every unit
#     test under them, and the end-to-end tests labelled `memory` (tests/CMakeLists.txt), the
#     container tests among them;
#   - builds with ThreadSanitizer, optimised like the release build (-O2, NDEBUG; the benchmarks
#     too, so that they keep compiling), and runs under it the unit tests of the modules with threads
#     and the end-to-end tests labelled `race`.
# Each test runs under one sanitizer at least, each end-to-end test under one only. There is no
# unsanitized pass: it cost ~700 s of a CI that must stay under 45 minutes on 2 cores (its build and
# its unit tests, which ASan runs too; bench/README.md, "CI: the sanitized binaries' start"); the
# quick start builds and runs the release build.
#   BERTH_SKIP_SANITIZE=1  builds unsanitized (RelWithDebInfo) instead and runs every test there.
# In a sanitizer pass the unit tests run one per CPU, then the end-to-end tests twice as many at a
# time (they mostly wait: leases, time windows, sleeping jobs), the longest first.
# The stages run one after another. Running the next build behind the tests at idle priority
# (SCHED_IDLE) was tried: the tests it ran behind took 1.3-2x as long, which ate nearly all it saved
# (bench/README.md, "CI: builds behind the tests").
# Every build is a unity build (scripts/configure.sh) with debug information of line tables only
# (BERTH_LINE_TABLES_ONLY, CMakeLists.txt: a failure's backtrace and a sanitizer's report keep every
# function, file, line and inlined frame; the builds take less time). Every configuration names its options
# explicitly (a cache left by scripts/quickstart.sh, which builds without tests, must not make a pass
# run nothing), and ctest fails when it finds no tests. Each stage says when it started.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh --for-tests
source scripts/configure.sh
stage() { echo "== $* (${SECONDS} s in)"; }
jobs=$(nproc)
ctest_args=(--output-on-failure -j"$jobs" --no-tests=error)

stage "format (clang-format --dry-run --Werror)"
git ls-files '*.cpp' '*.h' | xargs clang-format --dry-run --Werror
# The server's state machine knows nothing of HTTP (docs/design.md "Code layout").
if git grep -n '#include "server/http/' -- src/server/core; then
  echo "src/server/core/ includes src/server/http/ (the dependency goes the other way)" >&2
  exit 1
fi

stage "shape (scripts/check_shape.py: class, file and function sizes; no issue numbers in code)"
python3 scripts/check_shape.py

stage "headers compile on their own (g++ -fsyntax-only)"
git ls-files 'src/*.h' 'tests/*.h' | xargs -P"$jobs" -I{} sh -c \
  'echo "#include \"$1\"" | g++ -std=c++20 -fsyntax-only -x c++ -I src -I tests - ||
   { echo "$1 does not compile on its own: include what it uses" >&2; exit 1; }' _ {}

stage "lock annotations (clang -Wthread-safety)"
berth_configure build-tsa -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug -DBERTH_THREAD_SAFETY=ON \
  -DBERTH_BUILD_TESTS=OFF -DBERTH_BUILD_BENCH=OFF -DBERTH_LINE_TABLES_ONLY=ON
cmake --build build-tsa -j"$jobs" --target berth_common berth_store berth_server berth_agent

if [ "${BERTH_SKIP_SANITIZE:-0}" = "1" ]; then
  stage "build (RelWithDebInfo)"
  berth_configure build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBERTH_BUILD_TESTS=ON -DBERTH_BUILD_BENCH=ON \
    -DBERTH_SANITIZE=OFF -DBERTH_TSAN=OFF -DBERTH_LINE_TABLES_ONLY=ON
  cmake --build build -j"$jobs"
  stage "tests"
  (cd build && ctest "${ctest_args[@]}" --timeout 900)
  stage "all tests passed"
  exit 0
fi

# The repeated end-to-end race test runs fewer rounds under the (slow) sanitizers.
export BERTH_GANG_RACE_ROUNDS=6
# A pass's unit tests (labels unit and unit-threadless) one per CPU, then its end-to-end tests twice
# as many at a time: two at a time left half of the two CPUs idle. `skip`: the labels the pass skips.
sanitized_ctest() {
  local skip=$1
  ctest "${ctest_args[@]}" --timeout 1500 -L '^unit' -LE "$skip" &&
    ctest --output-on-failure -j"$((jobs * 2))" --no-tests=error --timeout 1500 -L '^integration$' -LE "$skip"
}

stage "build (ASan + UBSan)"
berth_configure build-asan -DCMAKE_BUILD_TYPE=Debug -DBERTH_SANITIZE=ON -DBERTH_TSAN=OFF \
  -DBERTH_BUILD_TESTS=ON -DBERTH_BUILD_BENCH=OFF -DBERTH_LINE_TABLES_ONLY=ON
cmake --build build-asan -j"$jobs"
stage "tests under ASan + UBSan (every unit test; the end-to-end tests labelled memory)"
(
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  cd build-asan && sanitized_ctest '^race$'
)

stage "build (TSan, optimised, with the benchmarks)"
berth_configure build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBERTH_TSAN=ON -DBERTH_SANITIZE=OFF \
  -DBERTH_BUILD_TESTS=ON -DBERTH_BUILD_BENCH=ON -DBERTH_LINE_TABLES_ONLY=ON
cmake --build build-tsan -j"$jobs"
# TSan runs neither the memory-labelled end-to-end tests nor the unit tests of the modules that
# start no thread (label unit-threadless, tests/CMakeLists.txt): it has nothing to look at there.
stage "tests under TSan (the unit tests of modules with threads; the end-to-end tests labelled race)"
(
  export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/scripts/tsan.supp"
  cd build-tsan && sanitized_ctest '^(memory|unit-threadless)$'
)
stage "all tests passed"
