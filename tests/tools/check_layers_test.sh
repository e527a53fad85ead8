#!/usr/bin/env bash
# tools/ci/check_layers.sh: this tree keeps DESIGN.md's layering, and an
# include that breaks it (ir/ reaching up to controller/, schedules/ using
# an ir/ header outside its list) is named with its file and line while the
# allowed ones around it are not.
#
#   check_layers_test.sh SOURCE_DIR
set -u
source_dir=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() { echo "check layers test FAILED: $*" >&2; exit 1; }

"$source_dir/tools/ci/check_layers.sh" "$source_dir" >"$work/tree" 2>&1 || {
  cat "$work/tree"
  fail "the source tree breaks its own layering"
}

mkdir -p "$work/root/ir" "$work/root/schedules" "$work/root/examples"
printf '#include <vector>\n#include "ir/graph.h"\n#include "controller/session.h"\n' >"$work/root/ir/a.h"
printf '#include "ir/ids.h"\n#include "schedules/schedule.h"\n#include "ir/graph.h"\n' >"$work/root/schedules/b.cc"
printf '#include <tandem/tandem.h>\n#include "ir/trace.h"\n' >"$work/root/examples/c.cc"
"$source_dir/tools/ci/check_layers.sh" "$work/root" >"$work/out" 2>&1
status=$?
cat "$work/out"
((status == 1)) || fail "exit status $status with two violations"
grep -q '^ir/a.h:3: includes "controller/session.h", but ir/ may use only: ir/ ' "$work/out" ||
  fail "ir/ including controller/ is not named"
grep -q '^schedules/b.cc:3: includes "ir/graph.h", but schedules/ may use only: ' "$work/out" ||
  fail "schedules/ including ir/graph.h is not named"
(($(grep -c 'includes "' "$work/out") == 2)) || fail "an allowed include was reported"
grep -q 'check_layers: 2 include(s) of 7 break' "$work/out" || fail "the count is wrong"
echo "check layers test passed"
