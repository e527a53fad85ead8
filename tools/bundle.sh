#!/usr/bin/env bash
# Makes a relocatable Tandem for GPU nodes that lack the build machine's
# Debian packages (Cap'n Proto, Abseil, oneTBB, OpenBLAS, ...).
#
#   tools/bundle.sh DIR
#
# From the build in build/ (or $TANDEM_BUILD_DIR, as tools/setup.sh takes
# it), writes
#   DIR/bin/      tandem, tandem-actor (debug info stripped, RPATH $ORIGIN/../lib)
#   DIR/tests/    the test binaries labelled gpu (RPATH $ORIGIN/../lib)
#   DIR/lib/      every shared library they load, except glibc, libstdc++ and
#                 libgcc_s, the CUDA driver, cuBLAS, cuDNN and NCCL, which a
#                 GPU node has of its own (RPATH $ORIGIN)
#   DIR/share/tandem/bench/   the PyTorch sides of the benchmarks
#   DIR/tools/gpu_check.sh    the GPU self-check (it finds the bundle it is in),
#                             and the summary of its ncu reports (ncu_summary.awk)
# and DIR.tar.gz beside it, refused above 64 MiB. Nothing outside DIR is
# needed at run time but the libraries above, so DIR may be moved anywhere
# and run with LD_LIBRARY_PATH empty.
set -euo pipefail

if [[ $# -ne 1 || "$1" == -* ]]; then
  echo "usage: tools/bundle.sh DIR" >&2
  exit 2
fi
repo=$(cd "$(dirname "$0")/.." && pwd)
build=${TANDEM_BUILD_DIR:-build}
[[ "$build" == /* ]] || build="$repo/$build"
out=$1
max_bytes=$((64 << 20))

for b in bin/tandem bin/tandem-actor; do
  [[ -x "$build/$b" ]] || { echo "tools/bundle.sh: $build/$b is missing: build first (tools/setup.sh)" >&2; exit 1; }
done
for tool in patchelf objcopy ldd; do
  command -v "$tool" >/dev/null || { echo "tools/bundle.sh: needs $tool (tools/setup.sh installs it)" >&2; exit 1; }
done
if [[ -e "$out" && -n "$(ls -A "$out" 2>/dev/null)" ]]; then
  echo "tools/bundle.sh: $out exists and is not empty" >&2
  exit 1
fi

# The GPU tests, as ctest lists them (absolute paths inside the build).
gpu_tests=$(ctest --test-dir "$build" -N -L '^gpu$' --show-only=json-v1 2>/dev/null | python3 -c '
import json, sys
for test in json.load(sys.stdin).get("tests", []): print(test["command"][0])' | sort -u)

mkdir -p "$out/bin" "$out/tests" "$out/lib" "$out/share/tandem/bench" "$out/tools"
out=$(cd "$out" && pwd)
binaries=()
copy_binary() {  # copy_binary SOURCE DEST_DIR
  local dest="$2/$(basename "$1")"
  objcopy --strip-debug "$1" "$dest"
  patchelf --set-rpath '$ORIGIN/../lib' "$dest"
  binaries+=("$1")
}
copy_binary "$build/bin/tandem" "$out/bin"
copy_binary "$build/bin/tandem-actor" "$out/bin"
for t in $gpu_tests; do
  [[ -x "$t" ]] && copy_binary "$t" "$out/tests"
done

# What the node brings: glibc's libraries and loader, the C++ runtime, the
# CUDA driver and the CUDA libraries NVIDIA ships with the toolkit and driver.
node_provided='/(libc|libm|libdl|librt|libpthread|libutil|libresolv|ld-linux[^/]*|libstdc\+\+|libgcc_s|libcuda|libnvidia-[^/]*|libcublas|libcublasLt|libcudnn[^/]*|libnccl)\.so'
for b in "${binaries[@]}"; do ldd "$b"; done | awk '/=> \// {print $3}' | sort -u | grep -v -E "$node_provided" |
  while read -r lib; do
    cp -L "$lib" "$out/lib/"
    chmod u+w "$out/lib/$(basename "$lib")"
    patchelf --set-rpath '$ORIGIN' "$out/lib/$(basename "$lib")"
  done
for b in "${binaries[@]}"; do
  if ldd "$b" | grep -q 'not found'; then
    echo "tools/bundle.sh: $b has unresolved libraries here:" >&2
    ldd "$b" | grep 'not found' >&2
    exit 1
  fi
done

cp "$repo"/tools/bench/*.py "$out/share/tandem/bench/"
cp "$repo/tools/gpu_check.sh" "$repo/tools/ncu_summary.awk" "$out/tools/"
git -C "$repo" rev-parse HEAD > "$out/COMMIT" 2>/dev/null || echo unknown > "$out/COMMIT"

tarball="$out.tar.gz"
tar -C "$(dirname "$out")" -czf "$tarball" "$(basename "$out")"
bytes=$(stat -c %s "$tarball")
if ((bytes > max_bytes)); then
  echo "tools/bundle.sh: $tarball is $bytes bytes, over the 64 MiB a bundle may take" >&2
  exit 1
fi
echo "bundle: $out (${#binaries[@]} binaries, $(ls "$out/lib" | wc -l) libraries); $tarball: $bytes bytes"
