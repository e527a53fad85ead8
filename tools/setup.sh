#!/usr/bin/env bash
# Sets Tandem up on a Debian 12 machine and builds it, incrementally.
#
#   tools/setup.sh            install what is missing (as root, with apt-get),
#                             configure build/ and build everything
#
# Safe to run again: it installs only missing packages and rebuilds only what
# changed. With CI=true the build treats warnings as errors.
set -euo pipefail

cd "$(dirname "$0")/.."
build_dir=${TANDEM_BUILD_DIR:-build}

packages=(
  build-essential cmake ninja-build pkg-config git
  capnproto libcapnp-dev          # control plane (RPC)
  libgloo-dev                     # data-parallel collectives on CPU
  libabsl-dev                     # Status, strings, containers
  libtbb-dev                      # CPU-parallel work
  libgtest-dev libgmock-dev       # tests
  libbenchmark-dev                # micro-benchmarks
  libopenblas-dev                 # fp32 GEMM of the reference kernels
  zlib1g-dev                      # CRC-32 of checkpoint files
  libcli11-dev                    # the `tandem` command line
  nlohmann-json3-dev              # every JSON file Tandem reads or writes
  libxxhash-dev                   # content hashes (programs, compiled steps)
  libedit-dev                     # line editing in `tandem repl`
  tmux                            # the REPL's terminal test
  clang libclang-rt-14-dev        # libFuzzer targets and sanitizer builds (tests/fuzz/)
  pybind11-dev python3-pybind11 python3-dev  # the Python stub (python_stub/)
  python3-torch python3-numpy     # PyTorch: the outside reference in tests and benchmarks
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
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

werror=OFF
[[ "${CI:-}" == "true" ]] && werror=ON
if [[ ! -f "$build_dir/build.ninja" ]]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTANDEM_WERROR=$werror
fi
cmake --build "$build_dir" -j"${TANDEM_JOBS:-2}"
