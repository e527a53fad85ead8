#!/usr/bin/env bash
# `tandem train --launcher slurm` on a real Slurm cluster: a private
# slurmctld and three slurmd on this machine (mini_cluster.sh), torn down
# whatever happens. Under `salloc -N 3`, across the three nodes:
#  1. GPT, P=2 x D=2 (4 actors on 3 nodes), 1f1b and zb-h1, with --verify:
#     bit-identical to the single-process reference;
#  2. the data plane by placement: shared memory between the two actors on
#     n1, TCP to the others;
#  3. an actor killed on n2: the controller exits non-zero within 5 s
#     naming the actor, n2, its stage and the step, and no step, task or
#     actor of the job is left (squeue, /proc);
#  4. the job's srun step scancel'ed: a clean error that names the
#     cancellation, and nothing left;
#  5. examples/slurm/gpt_2x2.sbatch, submitted with sbatch, verified;
#  6. node n2 lost (its slurmd, step daemon and actor killed at once): the
#     same within 5 s, without waiting for Slurm to notice.
#
#   slurm_cluster_test.sh TANDEM     exit 0 on success, 77 (skip) without
#                                    root or Slurm, 1 on a failure
#
# The controller runs inside the allocation as a user's would; the actors
# are the tasks of its one srun step, and dial it over TCP on loopback
# (every node of this cluster is this machine).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cluster=$here/mini_cluster.sh
tandem=${1:?usage: slurm_cluster_test.sh TANDEM}
tandem=$(realpath "$tandem")
"$cluster" check-root || exit $?

for name in $(compgen -e); do
  case "$name" in SLURM_* | SALLOC_* | SBATCH_* | SRUN_*) unset "$name" ;; esac
done

test_start=$EPOCHREALTIME
dir=$(mktemp -d /tmp/tandem-slurm-train-XXXXXX)
chmod 0711 "$dir"

test_name=slurm_cluster_test
# shellcheck source=test_lib.sh
source "$here/test_lib.sh"
down_on_exit "logs in $dir (train-*.out/err, log/)"

# Live tandem-actor processes of this cluster's jobs: pid and node.
actors() {
  local pid
  for pid in $(pgrep -x tandem-actor || true); do
    if grep -qszxF "SLURM_CONF=$dir/slurm.conf" "/proc/$pid/environ"; then
      echo "$pid $(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | sed -n 's/^SLURMD_NODENAME=//p')"
    fi
  done
  return 0
}
no_actor_left() { [[ -z "$(actors)" ]]; }
no_job_left() { [[ -z "$(timeout 5 squeue -h 2>/dev/null)" ]]; }

MINI_CLUSTER_OWNER=$$ "$cluster" up "$dir" 3 >/dev/null
source "$dir/env"
echo "up: 3 idle nodes ($dir)"

common=(train --launcher slurm --bind 127.0.0.1 --model gpt --layers 4 --actors 2 --data-parallel 2
  --microbatches 4 --eval-batches 0 --log-every 1)

# 1. Bit-identity across the nodes.
for schedule in 1f1b zb-h1; do
  start=$EPOCHREALTIME
  out=$dir/train-$schedule.out
  timeout 300 salloc -N 3 -n 4 "$tandem" "${common[@]}" --schedule "$schedule" --steps 3 --verify \
    >"$out" 2>"$dir/train-$schedule.err" ||
    fail "salloc -N 3 tandem train --schedule $schedule --verify failed:"$'\n'"$(tail -20 "$dir/train-$schedule.err")"
  grep -q 'bit-identical to the reference' "$out" || fail "no verify line for $schedule: $(cat "$out")"
  grep -q 'slurm launcher' "$out" || fail "the run did not use the slurm launcher: $(head -5 "$out")"
  echo "$schedule: P=2 x D=2 on 3 nodes bit-identical to the reference in $(since "$start") s"
done
await 10 no_job_left || fail "a job is still in squeue: $(squeue -h)"

# Starts a long run in the background; sets train_pid.
start_long_run() {
  local name=$1
  timeout 300 salloc -N 3 -n 4 "$tandem" "${common[@]}" --schedule 1f1b --steps 1000000 \
    >"$dir/$name.out" 2>"$dir/$name.err" &
  train_pid=$!
  running() { grep -qs '^step' "$dir/$name.out" && (($(actors | wc -l) == 4)); }
  await 120 running || fail "the $name run did not start training: $(tail -5 "$dir/$name.out" "$dir/$name.err")"
}
train_gone() { ! kill -0 "$train_pid" 2>/dev/null; }

# 2. The data plane by placement (--transport auto, slurm's default):
#    srun puts tasks 0 and 1 on n1, 2 on n2, 3 on n3. Actor 0 maps the ring
#    actor 1 writes to it (shared memory on one node), and none from actor 2
#    or 3 (TCP between nodes).
start_long_run killed
# The pid of the live actor with id $1.
pid_of() {
  local pid _node
  while read -r pid _node; do
    if [[ "$(tr '\0' '\n' <"/proc/$pid/environ" | sed -n 's/^SLURM_PROCID=//p')" == "$1" ]]; then
      echo "$pid"
    fi
  done < <(actors)
  return 0
}
actor0=$(pid_of 0)
[[ -n "$actor0" ]] || fail "no actor 0: $(actors | xargs)"
grep -q 'memfd:tandem-1-to-0' "/proc/$actor0/maps" ||
  fail "actor 0 does not map actor 1's ring though both run on n1: $(grep -o 'memfd:tandem-[0-9-]*to-0' "/proc/$actor0/maps" | sort -u | xargs)"
! grep -qE 'memfd:tandem-[23]-to-0' "/proc/$actor0/maps" ||
  fail "actor 0 maps a ring of an actor on another node: $(grep -o 'memfd:tandem-[0-9-]*to-0' "/proc/$actor0/maps" | sort -u | xargs)"
echo "placement: actor 0 on n1 reads actor 1 (n1) from shared memory and actors 2, 3 (n2, n3) over TCP"

# 3. An actor killed on n2.
read -r victim_pid victim_node < <(actors | awk '$2 == "n2"' | head -1)
[[ -n "${victim_pid:-}" ]] || fail "no actor runs on n2: $(actors | xargs)"
victim=$(tr '\0' '\n' <"/proc/$victim_pid/environ" | sed -n 's/^SLURM_PROCID=//p')
kill_start=$EPOCHREALTIME
kill -KILL "$victim_pid"
await 5 train_gone || fail "tandem train still runs 5 s after actor $victim on n2 was killed"
status=0
wait "$train_pid" || status=$?
kill_seconds=$(since "$kill_start")
((status != 0)) || fail "tandem train exited 0 after an actor was killed"
error=$(grep -E '^tandem( train)?:' "$dir/killed.err" | tail -1 || true)
[[ -n "$error" ]] || error=$(tail -1 "$dir/killed.err")
for want in "actor $victim " "n2" "stage" "step" "Killed"; do
  [[ "$error" == *"$want"* ]] || fail "the error does not name '$want': $error"
done
# srun cancels the step after the kill (--kill-on-bad-exit): not the cause.
[[ "$error" != *"(***"* ]] || fail "the error blames a cancellation for a killed actor: $error"
await 5 no_actor_left || fail "actors outlived the job: $(actors | xargs)"
await 10 no_job_left || fail "the job outlived its controller: $(squeue -h)"
echo "actor $victim killed on $victim_node: exit $status in $kill_seconds s: $error"

# 4. The step scancel'ed.
start_long_run cancelled
step=$(timeout 5 squeue -h -s -o '%i' | grep -E '^[0-9]+\.0$' | head -1)
[[ -n "$step" ]] || fail "no step 0 in squeue: $(squeue -h -s)"
cancel_start=$EPOCHREALTIME
timeout 10 scancel "$step"
await 10 train_gone || fail "tandem train still runs 10 s after scancel $step"
status=0
wait "$train_pid" || status=$?
((status != 0)) || fail "tandem train exited 0 after scancel"
error=$(grep -E '^tandem( train)?:' "$dir/cancelled.err" | tail -1 || true)
[[ -n "$error" ]] || error=$(tail -1 "$dir/cancelled.err")
[[ "$error" == *CANCELLED* ]] || fail "the error does not name the cancellation: $error"
[[ "$error" == *srun* ]] || fail "the error does not say srun ended the actors: $error"
await 5 no_actor_left || fail "actors outlived the cancelled step: $(actors | xargs)"
await 10 no_job_left || fail "the job outlived its controller: $(squeue -h)"
echo "scancel $step: exit $status in $(since "$cancel_start") s: $error"

# 5. The example batch script, submitted as a user would (2 nodes).
start=$EPOCHREALTIME
TANDEM=$tandem TANDEM_STEPS=2 TANDEM_ARGS="--bind 127.0.0.1 --verify --eval-batches 0" \
  timeout 300 sbatch --wait --parsable -o "$dir/example-%j.out" "$here/../../examples/slurm/gpt_2x2.sbatch" \
  >"$dir/example.id" || fail "sbatch examples/slurm/gpt_2x2.sbatch failed: $(cat "$dir"/example-*.out)"
grep -q 'bit-identical to the reference' "$dir"/example-*.out ||
  fail "the example's run did not verify: $(tail -20 "$dir"/example-*.out)"
await 10 no_job_left || fail "the example's job is still in squeue: $(squeue -h)"
echo "examples/slurm/gpt_2x2.sbatch: 2 nodes, bit-identical to the reference in $(since "$start") s"

# 6. Node n2 lost: its slurmd, its step daemon and its actor killed at
#    once, as when the machine dies. Slurm learns of it only after
#    SlurmdTimeout; the controller must not wait for that.
start_long_run lost
read -r victim_pid _ < <(actors | awk '$2 == "n2"' | head -1)
[[ -n "${victim_pid:-}" ]] || fail "no actor runs on n2: $(actors | xargs)"
victim=$(tr '\0' '\n' <"/proc/$victim_pid/environ" | sed -n 's/^SLURM_PROCID=//p')
stepd=$(ps -o ppid= -p "$victim_pid" | tr -d ' ')
slurmd_n2=$(<"$dir/run/slurmd-n2.pid")
lost_start=$EPOCHREALTIME
kill -KILL "$slurmd_n2" "$stepd" "$victim_pid"
await 5 train_gone || fail "tandem train still runs 5 s after node n2 was lost"
status=0
wait "$train_pid" || status=$?
((status != 0)) || fail "tandem train exited 0 after node n2 was lost"
error=$(grep -E '^tandem( train)?:' "$dir/lost.err" | tail -1 || true)
for want in "actor $victim " "n2" "stage" "step"; do
  [[ "$error" == *"$want"* ]] || fail "the error does not name '$want': $error"
done
await 10 no_actor_left || fail "actors outlived the job after n2 was lost: $(actors | xargs)"
echo "node n2 lost: exit $status in $(since "$lost_start") s: $error"

echo "slurm_cluster_test passed in $(since "$test_start") s"
