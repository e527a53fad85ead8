#!/usr/bin/env bash
# `tandem repl` at a real terminal (tmux): line editing (a line fixed with
# Home/Ctrl-A before Enter), history (Up recalls the last command, and the
# history file keeps it), Ctrl-C stopping a long `step N` without ending the
# session, and quit leaving no actor behind.
#   repl_tmux_test.sh TANDEM_BINARY
set -euo pipefail
tandem=$1
work=$(mktemp -d /tmp/tandem-repl-tmux-XXXXXX)
socket="tandem-repl-test-$$"
cleanup() {
  tmux -L "$socket" kill-server 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# Waits (at most 60 s) until the pane shows text matching $1.
await() {
  for _ in $(seq 600); do
    if tmux -L "$socket" capture-pane -p -t repl -S -200 | grep -q -- "$1"; then return 0; fi
    sleep 0.1
  done
  echo "timed out waiting for: $1"; tmux -L "$socket" capture-pane -p -t repl -S -200; exit 1
}

tmux -L "$socket" new-session -d -s repl -x 160 -y 50 \
  "TANDEM_HISTORY=$work/history $tandem repl --model mlp --actors 2; echo REPL-EXITED \$?; sleep 30"
await "^(tandem)"

# Line editing: type "tep", go to the start of the line, insert "s".
tmux -L "$socket" send-keys -t repl "tep" C-a "s" Enter
await "step 1: loss"
# History: Up recalls "step", Enter runs it again.
tmux -L "$socket" send-keys -t repl Up Enter
await "step 2: loss"
# Ctrl-C stops a long run after the step in progress; the session goes on.
# The run is under way once a step of two digits or more shows: a given
# step (say 20) may scroll out of the 250 lines read between two looks, as
# a step takes under a millisecond.
tmux -L "$socket" send-keys -t repl "step 1000000" Enter
await "step [0-9]\{2,\}: loss"
tmux -L "$socket" send-keys -t repl C-c
await "interrupted after step"
tmux -L "$socket" send-keys -t repl "actors" Enter
await "pid "
pids=$(tmux -L "$socket" capture-pane -p -t repl -S -200 | sed -n 's/^ *[0-9]\+  pid \([0-9]\+\) .*/\1/p')
tmux -L "$socket" send-keys -t repl "quit" Enter
await "REPL-EXITED 0"

grep -qx "step" "$work/history" || { echo "history file lacks 'step':"; cat "$work/history"; exit 1; }
for pid in $pids; do
  state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || true)
  if [[ -n "$state" && "$state" != Z ]]; then echo "actor pid $pid outlived the REPL"; exit 1; fi
done
echo "repl tmux test passed (actors: $(echo $pids))"
