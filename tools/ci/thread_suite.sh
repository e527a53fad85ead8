#!/usr/bin/env bash
# The tests of the multithreaded, multiprocess parts under ThreadSanitizer,
# as CI runs them: the `tsan` preset (CMakePresets.json: build-tsan/,
# RelWithDebInfo, no CUDA), built with warnings as errors, only what those
# tests need (their executables and tandem-actor, which they start), then
# the tests labelled actor (executor, transports, collectives, the actor
# service and process), controller (launchers, pipelines, the REPL's
# debugger) and rpc (the control plane). A data race or a lock-order
# inversion fails the test that hit it (halt_on_error). Tests labelled
# `no_sanitizer`, `gpu` or `slurm` are left out.
#
# Not a CI part, and why: TSan sees only the synchronization of code built
# with it. Debian's Abseil and oneTBB are not, so an absl::Mutex or a TBB
# task boundary is invisible to it, and accesses that one lock guards on
# both sides are reported as races (e.g. TcpTransport::Start and
# ConnectPeers, both under mu_). With Debian's builds 236 of the 401
# tests fail that way; with TSan-built Abseil and oneTBB on the library
# path the suite is meaningful.
#
#   tools/ci/thread_suite.sh [CTEST_ARGS...]
#
# Environment: TANDEM_JOBS (build and test parallelism, default 2).
set -euo pipefail

cd "$(dirname "$0")/../.."
jobs=${TANDEM_JOBS:-2}

source tools/ci/preset.sh
configure_preset tsan build-tsan
targets=(tandem-actor)
while read -r target; do
  targets+=("$target")
done < <(ninja -C build-tsan -t targets all | sed -n 's/^\(\(actor\|controller\|rpc\)_[a-z0-9_]*_test\): .*/\1/p' | sort -u)
start=$SECONDS
cmake --build build-tsan -j"$jobs" --target "${targets[@]}"
echo "thread_suite: built ${#targets[@]} targets in $((SECONDS - start)) s"

export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
start=$SECONDS
status=0
ctest --test-dir build-tsan -j"$jobs" --output-on-failure -L '^(actor|controller|rpc)$' \
  -LE '^(no_sanitizer|gpu|slurm)$' "$@" || status=$?
echo "thread_suite: tests ran in $((SECONDS - start)) s"
exit "$status"
