#!/usr/bin/env bash
# tools/bundle.sh makes a relocatable Tandem: a bundle of this build, moved
# to another directory, loads every library it brings from its own lib/ (the
# node's glibc, C++ runtime and NVIDIA libraries aside), runs `tandem --help`
# and a 2-actor CPU `tandem train --verify` with LD_LIBRARY_PATH empty,
# finds the benchmarks' PyTorch scripts inside itself, and fits in 64 MiB
# compressed. It refuses a directory that is not empty.
#
#   bundle_test.sh SOURCE_DIR BUILD_DIR
set -u
source_dir=$1
build_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() { echo "bundle test FAILED: $*" >&2; exit 1; }

TANDEM_BUILD_DIR=$build_dir "$source_dir/tools/bundle.sh" "$work/made" > "$work/bundle.out" 2>&1 ||
  { cat "$work/bundle.out"; fail "tools/bundle.sh exited non-zero"; }
cat "$work/bundle.out"
tarball_bytes=$(stat -c %s "$work/made.tar.gz") || fail "no tarball beside the bundle"
((tarball_bytes <= 64 << 20)) || fail "the tarball is $tarball_bytes bytes, over 64 MiB"

# Moved elsewhere, as a node unpacks it.
mkdir -p "$work/elsewhere"
tar -C "$work/elsewhere" -xzf "$work/made.tar.gz" || fail "the tarball does not unpack"
rm -rf "$work/made"
bundle=$(readlink -f "$work/elsewhere/made")
for b in tandem tandem-actor; do [[ -x "$bundle/bin/$b" ]] || fail "bin/$b is missing"; done
[[ -x "$bundle/tools/gpu_check.sh" ]] || fail "tools/gpu_check.sh is missing"
[[ -f "$bundle/tools/ncu_summary.awk" ]] || fail "tools/ncu_summary.awk (gpu_check.sh's ncu summary) is missing"
[[ -f "$bundle/share/tandem/bench/torch_block.py" ]] || fail "the PyTorch scripts are missing"

# Every library a bundled binary loads comes from the bundle, but those the
# node brings.
node_provided='/(libc|libm|libdl|librt|libpthread|libutil|libresolv|ld-linux[^/]*|libstdc\+\+|libgcc_s|libcuda|libnvidia-[^/]*|libcublas|libcublasLt|libcudnn[^/]*|libnccl)\.so'
for b in "$bundle"/bin/* "$bundle"/tests/*; do
  [[ -x "$b" && "$b" != *.sh ]] || continue
  while read -r lib; do
    [[ "$(readlink -f "$lib")" == "$bundle/lib/"* ]] || fail "$(basename "$b") loads $lib from outside the bundle"
  done < <(env -u LD_LIBRARY_PATH ldd "$b" | awk '/=> \// {print $3}' | grep -v -E "$node_provided")
  if env -u LD_LIBRARY_PATH ldd "$b" | grep -q 'not found'; then fail "$(basename "$b") has libraries not found"; fi
done
[[ -n "$(ls "$bundle/lib")" ]] || fail "lib/ is empty"

env -u LD_LIBRARY_PATH -u TANDEM_ACTOR_BINARY "$bundle/bin/tandem" --help > "$work/help.out" 2>&1 ||
  fail "tandem --help failed: $(cat "$work/help.out")"
grep -q "train" "$work/help.out" || fail "tandem --help does not list train"

(cd "$work" && env -u LD_LIBRARY_PATH -u TANDEM_ACTOR_BINARY timeout 120 "$bundle/bin/tandem" train --model gpt \
  --layers 2 --actors 2 --schedule 1f1b --microbatches 4 --steps 2 --eval-batches 0 --verify) > "$work/train.out" 2>&1 ||
  { cat "$work/train.out"; fail "the bundled tandem train --verify failed"; }
grep -q "bit-identical" "$work/train.out" || { cat "$work/train.out"; fail "train --verify did not report parity"; }

# The benchmarks read the bundle's scripts, not the source tree's.
env -u LD_LIBRARY_PATH "$bundle/bin/tandem" bench block --help > "$work/block.out" 2>&1
grep -q -- "--torch-script TEXT=$bundle/share/tandem/bench/torch_block.py" "$work/block.out" ||
  { grep -- --torch-script "$work/block.out"; fail "bench block does not default to the bundle's script"; }

# The self-check runs from the moved bundle and ends with its table (the GPU
# tests skip without a GPU, and pass with one); a bad argument is a usage
# error.
OUT=$work/check env -u LD_LIBRARY_PATH timeout 120 "$bundle/tools/gpu_check.sh" --deadline 100 tests \
  > "$work/check.out" 2>&1 || { cat "$work/check.out"; fail "gpu_check.sh tests failed"; }
grep -q '^step  *status  *seconds  *last line$' "$work/check.out" || { cat "$work/check.out"; fail "no table"; }
grep -q '^backends_cuda_kernels_test  *0 ' "$work/check.out" || { cat "$work/check.out"; fail "no row for the kernel tests"; }
[[ -s "$work/check/gpu_check.log" ]] || fail "gpu_check.sh wrote no log"
if "$bundle/tools/gpu_check.sh" --deadline soon > "$work/usage.out" 2>&1; then fail "a bad --deadline was accepted"; fi
grep -q "takes seconds" "$work/usage.out" || fail "the usage error does not say why: $(cat "$work/usage.out")"
if timeout 10 "$bundle/tools/gpu_check.sh" --deadline > "$work/usage.out" 2>&1; then fail "a missing --deadline value was accepted"; fi
grep -q "needs a value" "$work/usage.out" || fail "a missing value is not named: $(cat "$work/usage.out")"
# --help prints the whole header, through its last line.
"$bundle/tools/gpu_check.sh" --help > "$work/help.out" 2>&1 || fail "--help failed"
tail -n 1 "$work/help.out" | grep -q '^Default deadline: 480 seconds.$' || { cat "$work/help.out"; fail "--help stops short"; }
# Where the node has no ncu, the ncu step says so and is no failure.
if ! command -v ncu > /dev/null && ! ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu > /dev/null 2>&1; then
  OUT=$work/ncu env -u LD_LIBRARY_PATH timeout 30 "$bundle/tools/gpu_check.sh" --deadline 20 ncu > "$work/ncu.out" 2>&1 ||
    { cat "$work/ncu.out"; fail "gpu_check.sh ncu failed without ncu"; }
  grep -q '^ncu-attention  *0 .*no ncu on this node' "$work/ncu.out" || { cat "$work/ncu.out"; fail "no row for ncu"; }
fi

# A directory that is not empty is refused.
mkdir -p "$work/full" && touch "$work/full/something"
if TANDEM_BUILD_DIR=$build_dir "$source_dir/tools/bundle.sh" "$work/full" > "$work/refused.out" 2>&1; then
  fail "tools/bundle.sh wrote into a directory that is not empty"
fi
grep -q "is not empty" "$work/refused.out" || fail "the refusal does not say why: $(cat "$work/refused.out")"

echo "bundle test passed"
