#!/usr/bin/env bash
# tools/ci/tsan_preload.cc does its job: with it preloaded, TSan stays
# silent for a counter shared under each synchronization it annotates
# (absl::Mutex, a reader lock, absl::CondVar, Mutex::Await,
# absl::Notification, kj::MutexGuarded), and still reports the same counter
# shared under none. TSan build only.
#
#   tsan_preload_test.sh PROBE PRELOAD
set -u
probe=$1
preload=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fail() { echo "tsan preload test FAILED: $*" >&2; exit 1; }

for mode in mutex reader-lock condvar await notification kj-mutex; do
  LD_PRELOAD=$preload TSAN_OPTIONS=halt_on_error=1:exitcode=66 "$probe" "$mode" >"$out" 2>&1
  status=$?
  ((status == 0)) || { cat "$out"; fail "$mode: exit $status, a synchronized counter was reported"; }
done
LD_PRELOAD=$preload TSAN_OPTIONS=halt_on_error=1:exitcode=66 "$probe" none >"$out" 2>&1
status=$?
((status == 66)) || { cat "$out"; fail "none: exit $status, the unsynchronized counter was not reported"; }
grep -q "WARNING: ThreadSanitizer: data race" "$out" || fail "none: no data race in TSan's report"
echo "tsan preload test passed"
