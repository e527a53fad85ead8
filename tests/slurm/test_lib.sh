# Helpers of the Slurm test scripts (sourced, not run). A script sets
# `test_name` before it calls fail.

# Says why the test failed and exits 1 (the script's EXIT trap cleans up).
fail() {
  echo "${test_name:-slurm test}: FAILED: $*" >&2
  exit 1
}

# Takes the cluster in $dir down when the script exits, however it exits;
# keeps $dir (its logs) when the script failed, saying so with $1 (where
# the logs are). Needs $cluster and $dir.
down_on_exit() {
  logs_hint=$1
  trap 'finish_cluster $?' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

finish_cluster() {
  local status=$1
  "$cluster" down "$dir" || status=1
  if ((status == 0)); then
    rm -rf "$dir"
  else
    echo "${test_name:-slurm test}: exit $status; $logs_hint" >&2
  fi
  exit "$status"
}

# Seconds since $1 (an $EPOCHREALTIME), to 0.1 s.
since() { awk -v start="$1" -v now="$EPOCHREALTIME" 'BEGIN { printf "%.1f", now - start }'; }

# Polls "$@" every 0.1 s for at most $1 seconds; 0 as soon as it succeeds.
await() {
  local deadline=$((${EPOCHREALTIME//[!0-9]/} + $1 * 1000000))
  shift
  until "$@"; do
    ((${EPOCHREALTIME//[!0-9]/} < deadline)) || return 1
    sleep 0.1
  done
}
