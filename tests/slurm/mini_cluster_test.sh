#!/usr/bin/env bash
# The private Slurm cluster every Slurm test stands on (mini_cluster.sh),
# checked for what Tandem's launcher relies on: a 3-node `salloc` whose one
# srun step gives each task SLURM_PROCID, SLURM_LOCALID and SLURMD_NODENAME
# and the caller's environment (a token); a `scancel` that leaves no process;
# a task killed on n2 that makes srun exit non-zero within 5 s naming n2 and
# the task; and a `down` after which nothing of the cluster is left.
#
#   mini_cluster_test.sh        exit 0 on success, 77 (skip) without root or
#                               the Slurm packages, 1 on a failure
#
# Two runs at once are fine: each has its own DIR, ports and token. If the
# test is killed, its EXIT trap (or, for SIGKILL, mini_cluster's watchdog)
# takes the cluster down; the DIR of a failed run is kept for its logs.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cluster=$here/mini_cluster.sh
"$cluster" check-root || exit $?

# Nothing of an enclosing Slurm job may leak into ours.
for name in $(compgen -e); do
  case "$name" in SLURM_* | SALLOC_* | SBATCH_* | SRUN_*) unset "$name" ;; esac
done

test_start=$EPOCHREALTIME
dir=$(mktemp -d /tmp/tandem-slurm-XXXXXX)
# Reaches the tasks through the environment only, never an argument.
TANDEM_TEST_TOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
export TANDEM_TEST_TOKEN

test_name=mini_cluster_test
# shellcheck source=test_lib.sh
source "$here/test_lib.sh"
down_on_exit "the cluster's logs are in $dir/log"

# Pids of the live processes whose environment holds this run's token or
# this cluster's SLURM_CONF, or whose command line names DIR: everything
# this test started through the cluster. (Call it once the two are no longer
# exported, or it finds its own commands.)
leftovers() {
  {
    pgrep -f -- "$dir" || true
    grep -lzxF -e "TANDEM_TEST_TOKEN=$TANDEM_TEST_TOKEN" -e "SLURM_CONF=$dir/slurm.conf" \
      /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3 || true
  } | sort -un | grep -vx -e "$$" -e "$BASHPID" || true
}

# Pids of this run's `sleep 300` tasks (srun runs them as /usr/bin/sleep).
our_sleeps() {
  local pid
  for pid in $(pgrep -f '^([^ ]*/)?sleep 300$' || true); do
    grep -qszxF "TANDEM_TEST_TOKEN=$TANDEM_TEST_TOKEN" "/proc/$pid/environ" &&
      echo "$pid"
  done
  return 0
}
no_sleep_left() { [[ -z "$(our_sleeps)" ]]; }
sleep_running() { [[ -n "$(our_sleeps)" ]]; }

up_start=$EPOCHREALTIME
MINI_CLUSTER_OWNER=$$ "$cluster" up "$dir" 3 >/dev/null
source "$dir/env"
up_seconds=$(since "$up_start")
echo "up: 3 idle nodes in $up_seconds s ($dir)"

# One step across the allocation: identities, and the token from the
# caller's environment.
out=$(timeout 30 salloc -N 3 srun bash -c \
  'echo "$SLURM_PROCID $SLURM_LOCALID $SLURMD_NODENAME ${TANDEM_TEST_TOKEN:-no-token}"' \
  2>"$dir/salloc.err") || { cat "$dir/salloc.err" >&2; fail "salloc -N 3 srun failed"; }
expected=$(printf '%s\n' "0 0 n1 $TANDEM_TEST_TOKEN" "1 0 n2 $TANDEM_TEST_TOKEN" "2 0 n3 $TANDEM_TEST_TOKEN")
[[ "$(sort <<<"$out")" == "$expected" ]] ||
  fail "salloc -N 3 srun printed (PROCID LOCALID NODENAME TOKEN):"$'\n'"$out"$'\n'"expected:"$'\n'"$expected"
echo "salloc -N 3 srun: procids 0..2 on n1..n3, the token reached every task"

# scancel of a running job: gone from squeue, and its task with it.
job=$(timeout 10 sbatch --parsable -N 1 -o "$dir/sleep-%j.out" --wrap 'srun sleep 300')
await 15 sleep_running || fail "job $job's 'sleep 300' did not start: $(squeue -j "$job" 2>&1)"
cancel_start=$EPOCHREALTIME
timeout 10 scancel "$job"
job_gone() { [[ -z "$(squeue -h -j "$job" 2>/dev/null)" ]] && no_sleep_left; }
await 5 job_gone ||
  fail "5 s after scancel: squeue: $(squeue -h -j "$job" 2>&1); sleeps: $(our_sleeps | xargs)"
echo "scancel: job $job and its task gone in $(since "$cancel_start") s"

# A task killed on n2: srun (--kill-on-bad-exit) ends the step, exits
# non-zero and names the node and the task.
: >"$dir/kill.out"
timeout 60 srun -N 3 --kill-on-bad-exit=1 bash -c 'echo "ready $SLURMD_NODENAME $$"; exec sleep 300' \
  >"$dir/kill.out" 2>"$dir/kill.err" &
srun_pid=$!
all_ready() { (($(grep -c '^ready ' "$dir/kill.out") == 3)); }
await 15 all_ready || fail "the 3 tasks did not start: $(cat "$dir/kill.out" "$dir/kill.err")"
victim=$(awk '$1 == "ready" && $2 == "n2" { print $3 }' "$dir/kill.out")
kill_start=$EPOCHREALTIME
kill -KILL "$victim"
srun_gone() { ! kill -0 "$srun_pid" 2>/dev/null; }
await 5 srun_gone || fail "srun still runs 5 s after its task on n2 was killed: $(cat "$dir/kill.err")"
status=0
wait "$srun_pid" || status=$?
kill_seconds=$(since "$kill_start")
((status != 0)) || fail "srun exited 0 after its task on n2 was killed"
grep -q 'n2: task 1: Killed' "$dir/kill.err" ||
  fail "srun's error does not name n2 and task 1:"$'\n'"$(cat "$dir/kill.err")"
await 5 no_sleep_left || fail "the other tasks outlived the step: $(our_sleeps | xargs)"
echo "task killed on n2: srun exited $status in $kill_seconds s: $(grep 'n2: task 1' "$dir/kill.err")"

# down: no daemon, step or task of this cluster is left.
down_start=$EPOCHREALTIME
"$cluster" down "$dir"
down_seconds=$(since "$down_start")
export -n TANDEM_TEST_TOKEN SLURM_CONF
left=$(leftovers | xargs)
[[ -z "$left" ]] || fail "left after down:"$'\n'"$(ps -o pid,ppid,stat,args -p "${left// /,}")"
echo "down: nothing left after $down_seconds s"
echo "mini_cluster_test passed in $(since "$test_start") s (up $up_seconds s, down $down_seconds s)"
