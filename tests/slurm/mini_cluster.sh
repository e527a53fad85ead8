#!/usr/bin/env bash
# A private, throw-away Slurm cluster on this one machine, for tests: one
# slurmctld and NODES slurmd (n1..nN, Debian's build runs several on one
# host), with their own munged, all state in DIR and every port chosen free
# by the OS when the cluster starts, so clusters in two DIRs never meet.
#
#   mini_cluster.sh up DIR [NODES]   start it (3 nodes by default), wait (at
#                                    most 30 s) until sinfo shows NODES idle
#                                    nodes, print the environment to export
#                                    on stdout and into DIR/env
#   mini_cluster.sh down DIR         cancel its jobs, end its daemons and
#                                    every process of its jobs; idempotent,
#                                    and safe after a partial `up`
#   mini_cluster.sh check-root       exit 0 if a cluster can run here, else
#                                    say why and exit 77 (CTest's skip code)
#
# A caller does `MINI_CLUSTER_OWNER=$$ mini_cluster.sh up "$dir"` and
# `source "$dir/env"` (or evals what `up` prints), runs salloc, sbatch or
# srun, and calls `down` from an EXIT trap.
# A caller that runs inside another Slurm job must unset its SLURM_* first.
# Needs root: slurmd starts job steps as their user. DIR and its parents
# must be searchable by everyone (munged insists on it for its socket); a
# mktemp -d under /tmp is fine, `up` opens DIR itself to 0711.
#
# Security: daemons listen on 127.0.0.1 only (CommunicationParameters
# NoInAddrAny), and requests are authenticated by a munged of our own with a
# fresh key in DIR/munge. auth/none would also work, but then anyone who can
# reach the ports (any local user at least) could run jobs as root.
#
# Cleanup when the caller dies: `up` leaves a watchdog that runs `down`
# within a second of the owner's exit, however it exits (a ctest timeout
# kills with SIGKILL, which no trap sees). The owner is MINI_CLUSTER_OWNER (a
# pid, or `none` for no watchdog), by default the parent of `up`: name it
# when `up` runs in a `$(...)` or under system(), whose shell exits at once.
# Remaining risks: a SIGKILL of the watchdog itself (or a reboot) leaves the
# daemons running until someone runs `down DIR`; a job process that leaves
# its step's process tree and also drops SLURM_CONF from its environment is
# not found by `down`; and `down` spares the processes of its own session
# (its caller's srun or salloc, which end once the daemons are gone).
#
# Our processes are found by facts only this cluster has, never by name:
#   - the daemons' pids (DIR/daemons, written by `up`, and their pid files),
#     checked against their command line, which names DIR;
#   - SLURM_CONF=DIR/slurm.conf in /proc/PID/environ: the daemons are
#     started with it, slurmstepd inherits it from slurmd, and job tasks
#     from the srun/salloc/sbatch that submitted them (which had to set it);
#   - every descendant of those.
#
# Environment: MINI_CLUSTER_OWNER (above), MINI_CLUSTER_CPUS (CPUs per node,
# default 4: the configuration wins over the hardware, so tests see the same
# nodes on every machine).
set -euo pipefail

readonly ready_timeout_s=30   # `up`: until NODES idle nodes
readonly start_attempts=3     # `up`: fresh ports after "Address already in use"
readonly term_grace_s=2       # `down`: from SIGTERM to SIGKILL
readonly kill_timeout_s=5     # `down`: after SIGKILL
readonly cancel_timeout_s=8   # `down`: until scancel'ed jobs leave squeue
self=$(realpath "$0")
# Client commands must reach only the cluster they are told to.
unset SLURM_CONF

log() { echo "mini_cluster: $*" >&2; }

usage() {
  sed -n '7,15p' "$self" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# Exits 77 with the reason when no cluster can run here.
check_root() {
  if [[ $(id -u) -ne 0 ]]; then
    log "skipped: needs root (slurmd runs job steps as their user); uid is $(id -u)"
    exit 77
  fi
  local missing=() tool
  for tool in slurmctld slurmd munged srun salloc sbatch sinfo squeue scancel scontrol python3; do
    command -v "$tool" >/dev/null || missing+=("$tool")
  done
  if ((${#missing[@]})); then
    log "skipped: missing ${missing[*]} (tools/setup.sh installs them)"
    exit 77
  fi
}

# shellcheck source=test_lib.sh
source "$(dirname "$self")/test_lib.sh"

# Runs a Slurm client command against this cluster, bounded in time.
client() { SLURM_CONF=$conf timeout 5 "$@"; }

# Prints COUNT distinct TCP ports that are free on 127.0.0.1 now, chosen by
# the kernel (bind to port 0), all held until all are chosen.
free_ports() {
  python3 - "$1" <<'EOF'
import socket, sys
held = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    held.append(s)
print(" ".join(str(s.getsockname()[1]) for s in held))
EOF
}

# Writes DIR/slurm.conf for $nodes nodes on the ports "$@" (slurmctld first).
write_config() {
  local ctld_port=$1 cpus=${MINI_CLUSTER_CPUS:-4} node
  shift
  {
    cat <<EOF
# Written by tests/slurm/mini_cluster.sh: a throw-away cluster in $dir.
ClusterName=mini
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmUser=root
SlurmdUser=root
# A private munged (DIR/munge), and nothing listening beyond loopback.
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
# No systemd, no cgroups: processes are tracked by parentage.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
# The configured CPUs win over what slurmd detects.
SlurmdParameters=config_overrides
ReturnToService=2
# A job's or step's tasks get 3 s from SIGTERM to SIGKILL (default 30); a
# node whose slurmd died is DOWN after 10 s (default 300).
KillWait=3
SlurmdTimeout=10
MailProg=/bin/true
PlugStackConfig=$dir/plugstack.conf
# Everything the daemons write stays in DIR.
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
EOF
    for ((node = 1; node <= nodes; node++)); do
      echo "NodeName=n$node NodeHostname=localhost NodeAddr=127.0.0.1 Port=${!node} CPUs=$cpus"
    done
    echo "PartitionName=all Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
  } >"$dir/slurm.conf"
  : >"$dir/plugstack.conf"
}

# Starts "$@" as daemon NAME ($1) in its own session, in the foreground (so
# its pid is $!), with SLURM_CONF set: the mark `down` looks for.
start_daemon() {
  local name=$1
  shift
  SLURM_CONF=$conf setsid "$@" </dev/null >"$dir/log/$name.out" 2>&1 &
  echo "$! $name" >>"$dir/daemons"
}

# 0 while every daemon in DIR/daemons runs; else names the dead one.
daemons_alive() {
  local pid name
  while read -r pid name; do
    if ! alive "$pid"; then
      dead_daemon=$name
      return 1
    fi
  done <"$dir/daemons"
}

# 0 if PID exists and is not a zombie.
alive() {
  local state
  state=$(sed -n 's/^[0-9]* (.*) \([A-Z]\) .*/\1/p' "/proc/$1/stat" 2>/dev/null) || return 1
  [[ -n "$state" && "$state" != Z ]]
}

# 0 once sinfo shows $nodes idle nodes. (sinfo retries for seconds when
# slurmctld does not answer: hence its own short bound.)
cluster_ready() {
  local idle
  idle=$(SLURM_CONF=$conf timeout 3 sinfo -h -N -o '%N %t' 2>/dev/null | awk '$2 == "idle"' | wc -l) ||
    return 1
  ((idle == nodes))
}

# The end of each daemon's log: NAME.log (its log file), or NAME.out (its
# stderr) when it died before opening that; without the noise of the PMIx
# plugins, which every slurmd fails to load (harmless: MpiDefault=none).
print_log_tails() {
  local out file
  for out in "$dir"/log/*.out; do
    file=${out%.out}.log
    [[ -s "$file" ]] || file=$out
    [[ -s "$file" ]] || continue
    echo "---- last lines of $file" >&2
    grep -v -e 'pmix' -e 'MPI: Cannot create context' "$file" | tail -n 15 >&2
  done
}

# One try at starting the cluster on fresh ports. Returns 0 when ready, 3
# when a port was taken in the meantime (worth another try), else 1. (Runs
# without errexit: it is called in a condition.)
start_cluster() {
  rm -rf "$dir/state" "$dir/spool" "$dir/log" "$dir/run" "$dir/daemons"
  mkdir -p "$dir/state" "$dir/log" "$dir/run" || return 1
  rm -f "$dir"/munge/munge.socket*
  : >"$dir/daemons"
  local ports node line
  line=$(free_ports $((nodes + 1))) || return 1
  read -r -a ports <<<"$line"
  write_config "${ports[@]}" || return 1

  start_daemon munged munged --foreground --key-file="$dir/munge/munge.key" \
    --socket="$dir/munge/munge.socket" --pid-file="$dir/run/munged.pid" \
    --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munged.seed"
  if ! await 10 test -S "$dir/munge/munge.socket"; then
    log "munged did not create its socket"
    return 1
  fi
  start_daemon slurmctld slurmctld -D -f "$conf"
  for ((node = 1; node <= nodes; node++)); do
    mkdir -p "$dir/spool/n$node"
    start_daemon "slurmd-n$node" slurmd -D -f "$conf" -N "n$node"
  done

  local deadline=$((SECONDS + ready_timeout_s))
  while true; do
    if ! daemons_alive; then
      if grep -qs 'Address already in use' "$dir"/log/*; then
        log "$dead_daemon: a port was taken between choosing and binding it (${ports[*]})"
        return 3
      fi
      log "$dead_daemon exited during start-up"
      return 1
    fi
    cluster_ready && return 0
    if ((SECONDS >= deadline)); then
      log "no $nodes idle nodes after ${ready_timeout_s} s; sinfo says:"
      client sinfo -N >&2 || true
      return 1
    fi
    sleep 0.2
  done
}

# Prints the start time of PID (field 22 of /proc/PID/stat), or nothing.
start_time() {
  sed -n 's/^.*) \(.*\)$/\1/p' "/proc/$1/stat" 2>/dev/null | awk '{print $20}'
}

# `mini_cluster.sh _watch DIR OWNER OWNER_START`: started by `up`; runs
# `down DIR` once OWNER has exited, unless the cluster went down before.
watch_owner() {
  local owner=$1 owner_start=$2
  while [[ -f "$dir/daemons" && "$(start_time "$owner")" == "$owner_start" ]]; do
    sleep 1
  done
  if [[ -f "$dir/daemons" ]]; then
    log "owner $owner exited without 'down': tearing $dir down"
    "$self" down "$dir"
  fi
}

up() {
  check_root
  nodes=${1:-3}
  [[ "$nodes" =~ ^[1-9][0-9]*$ ]] || usage
  if [[ ! "${MINI_CLUSTER_CPUS:-4}" =~ ^[1-9][0-9]*$ ]]; then
    log "MINI_CLUSTER_CPUS must be a positive number, not '$MINI_CLUSTER_CPUS'"
    exit 2
  fi
  mkdir -p "$dir"
  dir=$(realpath "$dir")
  conf=$dir/slurm.conf
  if [[ -n "$(cluster_pids)" ]]; then
    log "a cluster of $dir still runs: 'mini_cluster.sh down $dir' first"
    exit 1
  fi
  # munged refuses a socket in a directory not everyone can search.
  chmod 0711 "$dir"
  local path=$dir
  while [[ "$path" != / ]]; do
    if [[ $(stat -c %a "$path") != *[1357] ]]; then
      log "$path is not searchable by everyone, which munged requires: use a DIR under /tmp"
      exit 1
    fi
    path=$(dirname "$path")
  done
  if ((${#dir} > 80)); then
    log "$dir is too long for a Unix socket path under it: use a shorter DIR"
    exit 1
  fi
  mkdir -p "$dir/munge"
  chmod 0711 "$dir/munge"
  if [[ ! -s "$dir/munge/munge.key" ]]; then
    (umask 077 && head -c 1024 /dev/urandom >"$dir/munge/munge.key")
  fi

  trap 'log "interrupted"; down >/dev/null 2>&1; exit 1' INT TERM
  local started=$SECONDS attempt status
  for ((attempt = 1; ; attempt++)); do
    status=0
    start_cluster || status=$?
    ((status == 0)) && break
    if ((status != 3 || attempt == start_attempts)); then
      print_log_tails
      log "up failed in $dir; tearing down what was started"
      down >&2 || true
      exit 1
    fi
    down >/dev/null 2>&1 || true
    log "trying again on other ports"
  done
  trap - INT TERM

  local owner=${MINI_CLUSTER_OWNER:-$PPID} owner_start
  if [[ "$owner" != none ]]; then
    owner_start=$(start_time "$owner")
    if [[ -z "$owner_start" ]]; then
      log "owner $owner (MINI_CLUSTER_OWNER) is not a running process"
      down >&2 || true
      exit 1
    fi
    setsid "$self" _watch "$dir" "$owner" "$owner_start" \
      </dev/null >>"$dir/log/watchdog.log" 2>&1 &
    echo "$! watchdog" >>"$dir/daemons"
    log "watchdog: down when pid $owner exits ($(tr '\0' ' ' <"/proc/$owner/cmdline" | cut -c1-60 | sed 's/ *$//'))"
  fi
  printf 'export SLURM_CONF=%q\n' "$conf" >"$dir/env"
  log "$nodes nodes idle after $((SECONDS - started)) s in $dir (ports $(grep -o 'Port=[0-9]*' "$conf" | cut -d= -f2 | xargs))"
  cat "$dir/env"
}

# Prints the pids of this cluster's processes (see the header), never this
# process, its ancestors (the caller, or the watchdog running `down`) or
# anything in its session (the caller's own commands, a `| tee` after us):
# the daemons, steps and tasks all run in sessions of their own.
cluster_pids() {
  local seeds=() pid name pidfile
  if [[ -f "$dir/daemons" ]]; then
    while read -r pid name; do
      grep -qsF -- "$dir" "/proc/$pid/cmdline" && seeds+=("$pid")
    done <"$dir/daemons"
  fi
  for pidfile in "$dir"/run/*.pid; do
    [[ -f "$pidfile" ]] || continue
    pid=$(<"$pidfile")
    [[ "$pid" =~ ^[0-9]+$ ]] && grep -qsF -- "$dir" "/proc/$pid/cmdline" && seeds+=("$pid")
  done
  while IFS=/ read -r _ _ pid _; do
    seeds+=("$pid")
  done < <(grep -lzxF -- "SLURM_CONF=$conf" /proc/[0-9]*/environ 2>/dev/null || true)
  ((${#seeds[@]})) || return 0
  # Adds the descendants, drops zombies and what is ours (above).
  ps -e -o pid=,ppid=,sid=,stat= | awk -v seeds="${seeds[*]}" -v self="$BASHPID" '
    { parent[$1] = $2; session[$1] = $3; state[$1] = $4; children[$2] = children[$2] " " $1 }
    END {
      for (p = self; p > 1 && !(p in mine); p = parent[p]) mine[p] = 1
      for (p in session) if (session[p] == session[self]) mine[p] = 1
      n = split(seeds, queue, " ")
      for (i = 1; i <= n; i++) {
        p = queue[i]
        if (p in seen || !(p in parent) || p in mine) continue
        seen[p] = 1
        if (state[p] !~ /^Z/) print p
        m = split(children[p], kids, " ")
        for (j = 1; j <= m; j++) queue[++n] = kids[j]
      }
    }'
}

# 0 when no process of this cluster is left.
none_left() { [[ -z "$(cluster_pids)" ]]; }

# 0 when squeue lists no job.
no_jobs() { [[ -z "$(client squeue -h -o %A 2>/dev/null)" ]]; }

down() {
  local pids=() ctld jobs=() signal timeout
  # Jobs first, so that slurmstepd ends their tasks the usual way; only if
  # our slurmctld runs (a client waits for seconds on a dead one).
  ctld=$(awk '$2 == "slurmctld" { print $1 }' "$dir/daemons" 2>/dev/null || true)
  if [[ -n "$ctld" ]] && alive "$ctld" && grep -qsF -- "$dir" "/proc/$ctld/cmdline"; then
    read -r -a jobs <<<"$(SLURM_CONF=$conf timeout 3 squeue -h -o %A 2>/dev/null | xargs)"
    if ((${#jobs[@]})); then
      log "cancelling jobs ${jobs[*]}"
      client scancel "${jobs[@]}" 2>/dev/null || true
      await "$cancel_timeout_s" no_jobs ||
        log "jobs still listed after ${cancel_timeout_s} s: killing their processes"
    fi
  fi
  # Then every process: SIGTERM, and SIGKILL for what is left after
  # term_grace_s (a slurmstepd whose step was killed lingers for KillWait).
  for signal in TERM KILL; do
    read -r -a pids <<<"$(cluster_pids | xargs)"
    ((${#pids[@]})) || break
    kill -s "$signal" "${pids[@]}" 2>/dev/null || true
    timeout=$term_grace_s
    [[ $signal == KILL ]] && timeout=$kill_timeout_s
    await "$timeout" none_left && break
  done
  read -r -a pids <<<"$(cluster_pids | xargs)"
  if ((${#pids[@]})); then
    log "processes of $dir survived SIGKILL:"
    ps -o pid,ppid,stat,args -p "$(IFS=,; echo "${pids[*]}")" >&2 || true
    return 1
  fi
  rm -f "$dir/daemons" "$dir/env"
}

command=${1:-}
case "$command" in
  check-root)
    check_root
    ;;
  up)
    (($# >= 2 && $# <= 3)) || usage
    dir=$2
    up "${3:-}"
    ;;
  down)
    (($# == 2)) || usage
    dir=$(realpath -m "$2")
    conf=$dir/slurm.conf
    down
    ;;
  _watch)
    (($# == 4)) || usage
    dir=$2
    conf=$dir/slurm.conf
    watch_owner "$3" "$4"
    ;;
  *)
    usage
    ;;
esac
