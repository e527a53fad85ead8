#!/usr/bin/env bash
# Who may include whom: the table "Folders and who may depend on whom" of
# DESIGN.md, as rules, checked on every quoted #include of the source
# folders. CI runs it (the `layers` part of .ci/run). Each include that
# breaks a rule is printed as FILE:LINE with what the folder may use; the
# exit status is 1 if there is any, 0 otherwise.
#
#   tools/ci/check_layers.sh [ROOT]     ROOT: the source tree (default: this one)
#
# A rule lists what a folder's files may include besides system and
# third-party headers: whole folders ("rpc/") or single headers
# ("ir/ids.h"). tools/ and tests/ may include anything. Change a rule here
# and in DESIGN.md's table together.
set -uo pipefail

root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root" || exit 2

# The top-level names a quoted include of Tandem's starts with ("tandem/" is
# the public API: controller/include/tandem, examples/include/tandem).
tandem_folders='ir|backends|schedules|rpc|actor|controller|examples|tools|python_stub|tests|tandem'

declare -A may_use=(
  [ir]="ir/"
  [backends]="backends/ ir/"
  [schedules]="schedules/ ir/ids.h ir/excerpt.h ir/errno_status.h ir/read_file.h ir/stage_graph.h"
  [rpc]="rpc/ ir/"
  [actor]="actor/ backends/ ir/ rpc/"
  [controller]="controller/ ir/ schedules/ rpc/ backends/cpu/interpreter.h backends/cpu/kernel_threads.h tandem/tandem.h"
  [examples]="examples/ tandem/ backends/cpu/interpreter.h ir/initial_state.h ir/host_tensor.h ir/layers.h ir/optimizers.h ir/trace.h ir/tracer.h ir/graph.h ir/limits.h ir/train_step.h ir/single_update.h ir/state_file.h ir/errno_status.h ir/read_file.h ir/safetensors.h ir/state_source.h ir/excerpt.h ir/op_def.h"
  [python_stub]="python_stub/ tandem/ controller/ examples/ backends/ ir/ schedules/"
)

allowed() {  # allowed FOLDER INCLUDED_PATH
  local rule
  for rule in ${may_use[$1]}; do
    if [[ $rule == */ ]]; then
      [[ $2 == "$rule"* ]] && return 0
    else
      [[ $2 == "$rule" ]] && return 0
    fi
  done
  return 1
}

violations=0
checked=0
for folder in "${!may_use[@]}"; do
  [[ -d $folder ]] || continue
  while IFS=: read -r file line text; do
    included=$(sed -E 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]([^>"]+)[>"].*/\1/' <<<"$text")
    checked=$((checked + 1))
    if ! allowed "$folder" "$included"; then
      echo "$file:$line: includes \"$included\", but $folder/ may use only: ${may_use[$folder]} (DESIGN.md, \"Folders and who may depend on whom\")"
      violations=$((violations + 1))
    fi
  done < <(grep -rnE "^[[:space:]]*#[[:space:]]*include[[:space:]]*[<\"]($tandem_folders)/" "$folder" \
             --include='*.h' --include='*.cc' --include='*.cu' --include='*.cuh' --include='*.in' | sort)
done

if ((violations > 0)); then
  echo "check_layers: $violations include(s) of $checked break DESIGN.md's layering" >&2
  exit 1
fi
echo "check_layers: all $checked includes of Tandem's headers keep DESIGN.md's layering"
