#!/usr/bin/env bash
# Sets Tandem up on a Debian 12 machine and builds it, incrementally.
#
#   tools/setup.sh                  install what is missing (as root, with
#                                   apt-get), make the Python environment of
#                                   the tests and benchmarks (build/venv,
#                                   from PyPI: tools/python/make_venv.sh),
#                                   configure build/ and build everything
#   tools/setup.sh --packages-only  only install the missing Debian packages
#
# Safe to run again: it installs only missing packages, remakes the Python
# environment only when tools/python/requirements.txt changed, and rebuilds
# only what changed. With CI=true the build treats warnings as errors.
#
# No service these packages ship is started: Slurm's tests start private
# daemons of their own (tests/slurm/mini_cluster.sh) and want none running
# system-wide. Where the machine has no /usr/sbin/policy-rc.d, a refusing one
# is put there for the install and removed after it. (Under systemd the
# units stay enabled for the next boot: `systemctl disable munge` if that
# matters.)
set -euo pipefail

cd "$(dirname "$0")/.."
build_dir=${TANDEM_BUILD_DIR:-build}
packages_only=false
case "${1:-}" in
  "") ;;
  --packages-only) packages_only=true ;;
  *) echo "usage: tools/setup.sh [--packages-only]" >&2; exit 2 ;;
esac

packages=(
  build-essential cmake ninja-build pkg-config git
  capnproto libcapnp-dev          # control plane (RPC; kj-tls for TCP)
  libabsl-dev                     # Status, strings, containers
  libtbb-dev                      # CPU-parallel work
  libgtest-dev libgmock-dev       # tests
  libbenchmark-dev                # micro-benchmarks
  libopenblas-dev                 # fp32 GEMM of the reference kernels
  zlib1g-dev                      # CRC-32 of checkpoint files
  libssl-dev                      # HMAC-SHA256 and nonces: proving the job's token; TLS identity
  libcli11-dev                    # the `tandem` command line
  nlohmann-json3-dev              # every JSON file Tandem reads or writes
  libxxhash-dev                   # content hashes (programs, compiled steps)
  libedit-dev                     # line editing in `tandem repl`
  libsentencepiece-dev            # the tokenizer (`tandem tokenize`, token datasets)
  tmux                            # the REPL's terminal test
  patchelf                        # tools/bundle.sh: the relocatable bundle for GPU nodes
  clang libclang-rt-14-dev        # libFuzzer targets and sanitizer builds (tests/fuzz/)
  pybind11-dev python3-pybind11 python3-dev  # the Python stub (python_stub/)
  python3-venv                    # the tests' Python environment (PyTorch, transformers, JAX from PyPI)
  # A private Slurm cluster for the launcher's tests (tests/slurm/): one
  # slurmctld and several slurmd, authenticated by a munged of their own
  # (munge comes as a dependency; its system service is not started).
  slurmctld slurmd slurm-client slurm-wlm-basic-plugins
)

missing=()
for package in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$package")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  if [[ $(id -u) -ne 0 ]]; then
    echo "setup: run as root (or install these packages first): ${missing[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  policy=/usr/sbin/policy-rc.d   # exit 101: invoke-rc.d starts nothing
  own_policy=false
  if [[ ! -e $policy ]]; then
    own_policy=true
    trap 'rm -f "$policy"' EXIT
    printf '#!/bin/sh\n# tools/setup.sh: start no service during its install\nexit 101\n' >"$policy"
    chmod 755 "$policy"
  fi
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
  if $own_policy; then
    rm -f "$policy"
    trap - EXIT
  fi
fi
$packages_only && exit 0

# The Python environment is made while the C++ builds: making it is mostly
# downloading and unpacking (about 2 to 4 minutes from nothing), and only
# the tests need it. Its output is printed once it is done; a build that
# fails stops it.
mkdir -p build
venv_log=build/make_venv.log
tools/python/make_venv.sh build/venv >"$venv_log" 2>&1 &
venv_pid=$!
trap 'pkill -P "$venv_pid" 2>/dev/null; kill "$venv_pid" 2>/dev/null || true' EXIT

werror=OFF
[[ "${CI:-}" == "true" ]] && werror=ON
# In unity batches: CMake compiles up to 8 of a target's C++ sources as one
# translation unit, so the headers they share are parsed, and the templates
# they share instantiated, once per batch instead of once per file (README,
# "Building by hand": the figures). An edit then recompiles its file's batch; to
# rebuild file by file while editing, configure with -DCMAKE_UNITY_BUILD=OFF.
if [[ ! -f "$build_dir/build.ninja" ]]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_UNITY_BUILD=ON \
    -DTANDEM_WERROR=$werror
fi
cmake --build "$build_dir" -j"${TANDEM_JOBS:-2}"
venv_status=0
wait "$venv_pid" || venv_status=$?
trap - EXIT
cat "$venv_log"
if ((venv_status != 0)); then
  echo "setup: making the Python environment build/venv failed (exit $venv_status): its output is above" >&2
  exit "$venv_status"
fi
