#!/usr/bin/env bash
# CI's parts (tools/ci/parts.sh): a failing part never stops the parts after
# it, a part whose first link fails (a broken build before ctest) fails, and
# the closing status is non-zero naming every failed part.
#
#   ci_parts_test.sh SOURCE_DIR
set -u
source_dir=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() { echo "ci parts test FAILED: $*" >&2; exit 1; }

(
  set -uo pipefail
  source "$source_dir/tools/ci/parts.sh"
  # The README's command shape: a broken build (false) left of &&.
  run_part build bash -ec 'false && touch "$0/ctest-ran"' "$work"
  run_part tests bash -c 'echo "      Start 7: Suite.IsFailedPrecondition"; echo "[  FAILED  ] Suite.TheFlakyOne"; echo "[  PASSED  ] 9 tests"; exit 8'
  run_part later touch "$work/later-ran"
  run_part fine true
  finish_parts
) >"$work/out" 2>&1
status=$?

cat "$work/out"
((status != 0)) || fail "finish_parts exited 0 with failed parts"
[[ ! -e "$work/ctest-ran" ]] || fail "the command after a failed build ran"
[[ -e "$work/later-ran" ]] || fail "a part after a failed one did not run"
grep -q '^ci: FAILED: build tests$' "$work/out" || fail "the failed parts are not named"
grep -q '^ci: part build: FAILED (exit 1) in [0-9]* s$' "$work/out" || fail "no time for the failed part"
grep -q '^ci: part fine: ok in [0-9]* s$' "$work/out" || fail "no time for the passing part"
grep -q '^ci: part tests: FAILED (exit 8) in [0-9]* s$' "$work/out" || fail "a part's own exit status is not its result"
# The failed test is named again after the table, where a log's tail shows it.
sed -n '/^ci: total/,$p' "$work/out" | grep -q '^ci:   \[  FAILED  \] Suite.TheFlakyOne$' ||
  fail "the failed test is not repeated after the table"
! sed -n '/^ci: total/,$p' "$work/out" | grep -q -E 'PASSED|Start 7' || fail "lines that are not failures are repeated"

(
  source "$source_dir/tools/ci/parts.sh"
  run_part one true
  finish_parts
) >/dev/null 2>&1 || fail "finish_parts failed with every part passing"
echo "ci parts test passed"
