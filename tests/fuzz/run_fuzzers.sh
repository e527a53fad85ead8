#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz/ with clang, ASan and UBSan in
# build-fuzz/ (TANDEM_FUZZ=ON: only the libraries they need), then runs each
# for a bounded time, starting from its seed corpus and regressions.
#
#   tests/fuzz/run_fuzzers.sh [TARGET...]     all targets when none is named
#
# Environment: FUZZ_SECONDS (per target, default 45), FUZZ_BUILD_DIR
# (default build-fuzz), TANDEM_JOBS (build parallelism, default 2),
# FUZZ_JOBS (targets fuzzed at once, default TANDEM_JOBS).
#
# Prints per target its executions (libFuzzer's final stats), wall time,
# corpus size and result, and exits non-zero if any target crashed, leaked,
# hit UB, ran out of memory (-rss_limit_mb), allocated too much at once
# (-malloc_limit_mb) or spent too long on one input
# (-timeout). The offending input is saved under
# build-fuzz/artifacts/<target>/ (the log names it); copy it into
# tests/fuzz/regressions/<target>/ to keep it as a test once it is fixed.
# New inputs the fuzzers find go to build-fuzz/corpus/<target>/, never into
# the committed corpus.
set -euo pipefail

cd "$(dirname "$0")/../.."
build_dir=${FUZZ_BUILD_DIR:-build-fuzz}
seconds=${FUZZ_SECONDS:-45}
jobs=${TANDEM_JOBS:-2}
fuzz_jobs=${FUZZ_JOBS:-$jobs}
# Bounds on one target: memory, the largest single allocation (an input
# that makes a parser allocate more than this at once is a finding, however
# much memory is left: a size read from the input was not bounded), time
# per input, and the whole run (libFuzzer stops itself at max_total_time;
# `timeout` is the backstop should it hang).
rss_limit_mb=2048
malloc_limit_mb=256
input_timeout_s=10

launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
# -O1 with line tables, as libFuzzer's documentation builds and as the
# sanitizer trees do: a quarter less compile time than -O2 -g (clang,
# controller/local_launcher.cc: 17.4 s against 23.9), every report still
# with its files and lines; and in unity batches, as those trees are
# (tools/ci/sanitizer_suite.sh says why).
if [[ ! -f "$build_dir/build.ninja" ]]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_UNITY_BUILD=ON \
    -DTANDEM_FUZZ=ON -DTANDEM_BUILD_TESTS=OFF -DTANDEM_WITH_CUDA=OFF "${launcher[@]}" >/dev/null
fi
build_start=$SECONDS
cmake --build "$build_dir" --target tandem_fuzzers -j"$jobs"
echo "run_fuzzers: built in $((SECONDS - build_start)) s"

targets=("$@")
if ((${#targets[@]} == 0)); then
  for binary in "$build_dir"/fuzz/fuzz_*; do targets+=("${binary##*/fuzz_}"); done
fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# One target's run: its row of the summary goes to $results/<target>.row,
# and a failure's evidence to standard error in one piece (targets run side
# by side).
fuzz_target() {
  local target=$1
  local binary="$build_dir/fuzz/fuzz_$target"
  local seeds="tests/fuzz/corpus/$target"
  local regressions="tests/fuzz/regressions/$target"
  local row="$results/$target.row"
  if [[ ! -x "$binary" || ! -d "$seeds" || ! -d "$regressions" ]]; then
    echo "run_fuzzers: $target: needs $binary, $seeds/ and $regressions/" >&2
    printf '%-18s %12s %8s %10s  %s\n' "$target" - - - "FAILED (missing)" >"$row"
    return
  fi
  local work="$build_dir/corpus/$target"
  local artifacts="$build_dir/artifacts/$target"
  local log="$build_dir/logs/$target.log"
  mkdir -p "$work" "$artifacts" "$(dirname "$log")"
  echo "run_fuzzers: $target for ${seconds} s (log: $log)"
  local status=0 start=$SECONDS
  timeout --kill-after=10 $((seconds + 120)) "$binary" \
    -max_total_time="$seconds" -timeout="$input_timeout_s" -rss_limit_mb="$rss_limit_mb" -malloc_limit_mb="$malloc_limit_mb" \
    -print_final_stats=1 -artifact_prefix="$artifacts/" \
    "$work" "$seeds" "$regressions" >"$log" 2>&1 || status=$?
  local runs took corpus result=ok
  runs=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$log" | tail -1)
  took=$((SECONDS - start))
  corpus=$(find "$work" -type f | wc -l)
  if ((status != 0)); then
    result="FAILED (exit $status)"
    # The finding's first lines (what broke: a sanitizer's report, a failed
    # FuzzCheck, an uncaught exception), which two stack traces can push
    # out of the log's last lines, then those last lines.
    {
      echo "---- $target: the finding in $log"
      grep -a -m 8 -E 'runtime error|==ERROR|fuzz check failed|terminate called|SUMMARY' "$log" || true
      echo "---- $target: last lines of $log"
      tail -n 40 "$log"
      grep -h 'Test unit written to\|artifact_prefix' "$log" || true
      echo "---- to keep the input as a regression test once fixed: cp $artifacts/<file> $regressions/"
    } >"$results/$target.evidence" 2>&1
    cat "$results/$target.evidence" >&2
  fi
  printf '%-18s %12s %8s %10s  %s\n' "$target" "${runs:-?}" "$took" "$corpus" "$result" >"$row"
}

# FUZZ_JOBS targets at a time (default: TANDEM_JOBS): each is one process
# on one core, so on CI's two cores the whole run takes half as long.
results=$(mktemp -d "${TMPDIR:-/tmp}/run_fuzzers.XXXXXX")
trap 'rm -rf "$results"' EXIT
running=0
for target in "${targets[@]}"; do
  if ((running >= fuzz_jobs)); then
    wait -n || true
    running=$((running - 1))
  fi
  fuzz_target "$target" &
  running=$((running + 1))
done
wait

failed=()
summary=()
for target in "${targets[@]}"; do
  row=$(cat "$results/$target.row" 2>/dev/null || printf '%-18s %12s %8s %10s  %s' "$target" - - - "FAILED (no result)")
  summary+=("$row")
  [[ $row == *FAILED* ]] && failed+=("$target")
done

printf '\n%-18s %12s %8s %10s  %s\n' target executions seconds corpus result
printf '%s\n' "${summary[@]}"
if ((${#failed[@]})); then
  echo "run_fuzzers: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "run_fuzzers: every target ran without a finding"
