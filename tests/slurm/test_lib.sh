# Helpers of the Slurm test scripts (sourced, not run). A script sets
# `test_name` before it calls fail.

# Says why the test failed and exits 1 (the script's EXIT trap cleans up).
fail() {
  echo "${test_name:-slurm test}: FAILED: $*" >&2
  exit 1
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
