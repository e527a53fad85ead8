#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz/ with clang, ASan and UBSan in
# build-fuzz/ (TANDEM_FUZZ=ON: only the libraries they need), then runs each
# for a bounded time, starting from its seed corpus and regressions.
#
#   tests/fuzz/run_fuzzers.sh [TARGET...]     all targets when none is named
#
# Environment: FUZZ_SECONDS (per target, default 45), FUZZ_BUILD_DIR
# (default build-fuzz), TANDEM_JOBS (build parallelism, default 2).
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
if [[ ! -f "$build_dir/build.ninja" ]]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
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
failed=()
summary=()
for target in "${targets[@]}"; do
  binary="$build_dir/fuzz/fuzz_$target"
  seeds="tests/fuzz/corpus/$target"
  regressions="tests/fuzz/regressions/$target"
  if [[ ! -x "$binary" || ! -d "$seeds" || ! -d "$regressions" ]]; then
    echo "run_fuzzers: $target: needs $binary, $seeds/ and $regressions/" >&2
    failed+=("$target")
    continue
  fi
  work="$build_dir/corpus/$target"
  artifacts="$build_dir/artifacts/$target"
  log="$build_dir/logs/$target.log"
  mkdir -p "$work" "$artifacts" "$(dirname "$log")"
  echo "run_fuzzers: $target for ${seconds} s (log: $log)"
  status=0
  target_start=$SECONDS
  timeout --kill-after=10 $((seconds + 120)) "$binary" \
    -max_total_time="$seconds" -timeout="$input_timeout_s" -rss_limit_mb="$rss_limit_mb" -malloc_limit_mb="$malloc_limit_mb" \
    -print_final_stats=1 -artifact_prefix="$artifacts/" \
    "$work" "$seeds" "$regressions" >"$log" 2>&1 || status=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$log" | tail -1)
  took=$((SECONDS - target_start))
  corpus=$(find "$work" -type f | wc -l)
  if ((status == 0)); then
    result=ok
  else
    result="FAILED (exit $status)"
    failed+=("$target")
    # The finding's first lines (what broke: a sanitizer's report, a failed
    # FuzzCheck, an uncaught exception), which two stack traces can push
    # out of the log's last lines, then those last lines.
    echo "---- $target: the finding in $log" >&2
    grep -a -m 8 -E 'runtime error|==ERROR|fuzz check failed|terminate called|SUMMARY' "$log" >&2 || true
    echo "---- $target: last lines of $log" >&2
    tail -n 40 "$log" >&2
    grep -h 'Test unit written to\|artifact_prefix' "$log" >&2 || true
    echo "---- to keep the input as a regression test once fixed: cp $artifacts/<file> $regressions/" >&2
  fi
  summary+=("$(printf '%-18s %12s %8s %10s  %s' "$target" "${runs:-?}" "$took" "$corpus" "$result")")
done

printf '\n%-18s %12s %8s %10s  %s\n' target executions seconds corpus result
printf '%s\n' "${summary[@]}"
if ((${#failed[@]})); then
  echo "run_fuzzers: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "run_fuzzers: every target ran without a finding"
