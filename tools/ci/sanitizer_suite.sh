#!/usr/bin/env bash
# The whole test suite under ASan + UBSan, as CI runs it: the `asan` preset
# (CMakePresets.json: build-asan/, no CUDA; -O1 with line tables only, which
# compiles in about half the time of -O2 -g and still gives every report its
# files and lines; clang, whose UBSan instrumentation compiles in about a
# quarter less time than GCC's: the same 65 files 228 s against 301; in
# unity batches, up to 8 of a target's sources as one translation unit: the
# whole tree in 12 min against 16 min 50 s file by file), built with
# warnings as errors, then ctest. A memory error, a leak or undefined
# behaviour aborts the test that hit it (-fno-sanitize-recover), so the
# suite fails. Tests labelled `no_sanitizer` are left out; the CMake file
# that labels one says why.
#
#   tools/ci/sanitizer_suite.sh [CTEST_ARGS...]
#
# Environment: TANDEM_JOBS (build and test parallelism, default 2).
set -euo pipefail

cd "$(dirname "$0")/../.."
jobs=${TANDEM_JOBS:-2}

source tools/ci/preset.sh
configure_preset asan build-asan
start=$SECONDS
cmake --build build-asan -j"$jobs"
echo "sanitizer_suite: built in $((SECONDS - start)) s"

# Leaks are checked at every process exit, actors included. Tandem turns a
# failed allocation into ResourceExhausted, and its tests cause some
# (tests/testing/memory_limit.h): allocator_may_return_null lets malloc
# return null there, as it does without ASan, instead of aborting.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0:strict_string_checks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
start=$SECONDS
status=0
ctest --test-dir build-asan -j"$jobs" --output-on-failure -LE no_sanitizer "$@" || status=$?
echo "sanitizer_suite: tests ran in $((SECONDS - start)) s"
exit "$status"
