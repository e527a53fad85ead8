# CI's parts, for .ci/run to source: each part runs whatever the others did,
# every failure counts, and each part's time is printed as it ends and in
# the closing table. A failed part's evidence (its log's failure lines: the
# failed tests, gtest's failure messages, compiler errors, sanitizer
# reports) is printed again after the table, since the end of CI's log is
# often the only part of it a reader gets.
#
#   source tools/ci/parts.sh
#   run_part NAME COMMAND...   run COMMAND as part NAME; its exit status is
#                              the part's result
#   finish_parts               print the table and the failed parts'
#                              evidence; exit status 1 naming the failed
#                              parts, 0 when every part passed
#
# A part that is a chain of commands must fail when any link fails: give it
# as `bash -ec 'a && b'` (a failed `a` ends the chain with its status), never
# as a bare `a && b` under the caller's `set -e`, which ignores a failure
# left of `&&`.

ci_failed_parts=()
ci_part_rows=()
ci_log_dir=$(mktemp -d "${TMPDIR:-/tmp}/ci-parts.XXXXXX")

# The lines of a part's log that say what failed, at most 60 of them.
ci_failure_lines() {
  grep -a -E '(\*\*\*|FAILED|Failed|Failure|failed|error:|ERROR|Timeout|Exception|SEGV|Sanitizer|runtime error)' "$1" |
    grep -a -v -E ' Passed | 0 tests failed|^ +Start +[0-9]+: ' | tail -n 60
}

run_part() {
  local name=$1
  shift
  local start=$SECONDS status log
  log="$ci_log_dir/$name.log"
  echo "ci: part $name: $*"
  "$@" 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  local took=$((SECONDS - start)) result=ok
  if ((status != 0)); then
    result="FAILED (exit $status)"
    ci_failed_parts+=("$name")
  fi
  echo "ci: part $name: $result in $took s"
  ci_part_rows+=("$(printf '%-10s %6d s  %s' "$name" "$took" "$result")")
}

finish_parts() {
  printf '\nci: %-10s %8s  %s\n' part time result
  printf 'ci: %s\n' "${ci_part_rows[@]}"
  echo "ci: total $((SECONDS / 60)) min $((SECONDS % 60)) s"
  local name
  for name in "${ci_failed_parts[@]}"; do
    echo
    echo "ci: what part $name printed about its failure:"
    ci_failure_lines "$ci_log_dir/$name.log" | sed 's/^/ci:   /'
  done
  rm -rf "$ci_log_dir"
  if ((${#ci_failed_parts[@]})); then
    echo "ci: FAILED: ${ci_failed_parts[*]}" >&2
    return 1
  fi
  return 0
}
