#!/usr/bin/env bash
# The GPU self-check: runs Tandem's GPU tests and GPU benchmarks on a GPU
# node, each bounded in time, within one overall deadline, logs everything
# and ends with one table (step, exit status, seconds, its last line).
#
#   tools/gpu_check.sh [--deadline SECONDS] [--python PATH] [STEP...]
#
# Steps (default: all, in this order):
#   tests      every test binary labelled gpu
#   parity     tandem train --verify (bit-identical to the single-process GPU
#              reference) for 1f1b, zb-h1, interleaved and 2 x 2 data parallel,
#              and the llama model with AdamW, a cosine schedule and global-norm
#              clipping on 2 x 2, in each precision mode; then the llama model
#              in bf16 mixed precision (--precision bf16) on 4 actors
#   block      tandem bench block against PyTorch eager on the same GPU (at
#              d=2048 with scaled_dot_product_attention, as the target says;
#              and, Tandem only, with composed attention and with a kernel per
#              elementwise node, --unfused, to show what each fusion saves)
#   gpt        the example GPT's step on the reference interpreter (host
#              maps between graphs: the verifier, not a speed path), on one
#              actor (the whole model in one device process) and over 2
#              actors (again under CUDA's Multi-Process Service, as
#              dataplane), next to PyTorch's (tools/bench/torch_gpt_step.py)
#   dataplane  tandem bench dataplane --device cuda; again under CUDA's
#              Multi-Process Service where the node has it (a control daemon
#              of this user's, in a directory of its own, stopped after): two
#              processes' work then shares the GPU instead of taking turns
#   fidelity   tandem bench fidelity --device cuda (and under CUDA's MPS, as
#              dataplane)
#   profile    tandem bench block --device cuda --profile (GPU time per op),
#              at d=1024 in f32 and in bf16, at d=2048 in bf16
#   kernels    tandem bench kernels --device cuda: every kernel of GPT-2
#              small's step alone, its share of the GPU's peak, the CPU's
#              time beside it
#   ncu        Nsight Compute on the attention kernels: the d=1024 block's (f32),
#              and the tensor cores' at head width 128 (+bf16, d=2048)
#              (throughput, occupancy, launch, warp stalls), where the node
#              has ncu; then a line a launch (tools/ncu_summary.awk)
#
# Runs from a bundle (tools/bundle.sh: this script is DIR/tools/gpu_check.sh
# and the binaries are in DIR/bin) or from a checkout (the build in build/ or
# $TANDEM_BUILD_DIR). The node brings the CUDA driver, cuBLAS, cuDNN and
# NCCL; they are looked for under /usr/local/cuda*, /usr/lib, /opt and the
# NVIDIA wheels of the Python given (--python, default python3, which also
# runs PyTorch's side of the benchmarks). The log and the table go to
# $OUT/gpu_check.log ($OUT defaults to /tmp/tandem-gpu-check).
# Default deadline: 480 seconds.
set -u

deadline_s=480
python=python3
steps=()
while (($#)); do
  case "$1" in
    --deadline|--python)
      (($# >= 2)) || { echo "gpu_check.sh: $1 needs a value" >&2; exit 2; }
      if [[ "$1" == --deadline ]]; then deadline_s=$2; else python=$2; fi
      shift 2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
    tests|parity|block|gpt|dataplane|fidelity|profile|kernels|ncu) steps+=("$1"); shift ;;
    *) echo "gpu_check.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
((${#steps[@]})) || steps=(tests parity block gpt dataplane fidelity profile kernels ncu)
[[ "$deadline_s" =~ ^[0-9]+$ ]] || { echo "gpu_check.sh: --deadline takes seconds" >&2; exit 2; }
deadline=$(( $(date +%s) + deadline_s ))

here=$(cd "$(dirname "$0")" && pwd)
if [[ -x "$here/../bin/tandem" ]]; then   # a bundle
  root=$(cd "$here/.." && pwd); bin=$root/bin; tests=$root/tests; scripts=$root/share/tandem/bench
else                                      # a checkout
  root=$(cd "$here/.." && pwd); build=${TANDEM_BUILD_DIR:-build}; [[ "$build" == /* ]] || build=$root/$build
  bin=$build/bin; tests=$build/tests; scripts=$root/tools/bench
fi
[[ -x "$bin/tandem" ]] || { echo "gpu_check.sh: no tandem in $bin" >&2; exit 1; }
export TANDEM_BINARY=$bin/tandem

OUT=${OUT:-/tmp/tandem-gpu-check}
mkdir -p "$OUT"
log=$OUT/gpu_check.log
exec > >(tee -a "$log") 2>&1

# The node's CUDA libraries (the bundle's RPATH finds the rest).
libs=""
for name in libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2 libcublas.so.12 libcublasLt.so.12; do
  found=$(find /usr/local/cuda*/ /usr/lib /opt -name "$name" 2>/dev/null | head -n 1)
  if [[ -z "$found" ]]; then
    site=$(env -u LD_LIBRARY_PATH "$python" -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)
    for dir in $site; do found=$(find "$dir/nvidia" -name "$name" 2>/dev/null | head -n 1); [[ -n "$found" ]] && break; done
  fi
  [[ -n "$found" && ":$libs:" != *":$(dirname "$found"):"* ]] && libs="$libs${libs:+:}$(dirname "$found")"
done
export LD_LIBRARY_PATH=$libs

# PyTorch runs with the environment it was installed for.
torchpy=$OUT/torch-python
printf '#!/bin/sh\nunset LD_LIBRARY_PATH\nexec %q "$@"\n' "$(command -v "$python" || echo "$python")" > "$torchpy"
chmod +x "$torchpy"

table=()
run() {  # run LIMIT NAME CMD...: bounded by LIMIT and by the deadline
  local limit=$1 name=$2; shift 2
  local left=$(( deadline - $(date +%s) ))
  if (( left < 15 )); then table+=("$name|skipped|0|deadline"); echo "=== $name: skipped (deadline)"; return; fi
  (( limit > left )) && limit=$left
  echo "=== $name (limit ${limit}s): $*"
  local start=$(date +%s%N) step_log=$OUT/step-$name.log
  timeout -k 5 "$limit" "$@" > >(tee "$step_log") 2>&1
  local rc=$?
  local seconds=$(awk -v ns=$(( $(date +%s%N) - start )) 'BEGIN{printf "%.1f", ns / 1e9}')
  sleep 0.1   # let tee finish the step's log
  local last=$(grep -v '^[[:space:]]*$' "$step_log" | tail -n 1 | cut -c1-110)
  ((rc == 124 || rc == 137)) && last="timed out after ${limit}s; $last"
  table+=("$name|$rc|$seconds|$last")
  echo "=== $name: rc=$rc in ${seconds}s"
}

# run_under_mps LIMIT NAME CMD...: `run` under CUDA's Multi-Process Service
# (a control daemon of this user's, in a directory of its own, stopped
# after), where the node has it: several processes' work then shares the
# GPU instead of taking turns.
run_under_mps() {
  command -v nvidia-cuda-mps-control >/dev/null || return 0
  local mps
  mps=$(mktemp -d /tmp/tandem-mps.XXXXXX)
  if CUDA_MPS_PIPE_DIRECTORY=$mps CUDA_MPS_LOG_DIRECTORY=$mps nvidia-cuda-mps-control -d; then
    CUDA_MPS_PIPE_DIRECTORY=$mps run "$@"
    echo quit | CUDA_MPS_PIPE_DIRECTORY=$mps nvidia-cuda-mps-control
  fi
  rm -rf "$mps"
}

echo "gpu_check: $(date -u +%FT%TZ), tandem $(cat "$root/COMMIT" 2>/dev/null || git -C "$root" rev-parse --short HEAD 2>/dev/null)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || echo "nvidia-smi: not found"
"$torchpy" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -n 1
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"

G=(--model gpt --dim 256 --heads 8 --seq 128 --batch 8 --layers 8 --microbatches 8 --eval-batches 0)
for step in "${steps[@]}"; do
  case "$step" in
    tests)
      for t in "$tests"/*; do [[ -x "$t" ]] && run 150 "$(basename "$t")" "$t" --gtest_color=no --gtest_brief=1; done ;;
    parity)
      for mode in cuda cuda+tf32 cuda+bf16; do
        for s in 1f1b zb-h1; do
          run 90 "verify-$s-$mode" "$bin/tandem" train --device "$mode" --model gpt --layers 4 --actors 2 --schedule "$s" \
            --microbatches 8 --steps 3 --eval-batches 0 --verify
        done
        run 90 "verify-interleaved-$mode" "$bin/tandem" train --device "$mode" --model gpt --layers 8 --actors 4 \
          --schedule interleaved --microbatches 8 --steps 3 --eval-batches 0 --verify
        run 90 "verify-dp2-$mode" "$bin/tandem" train --device "$mode" --model gpt --layers 4 --actors 2 --data-parallel 2 \
          --schedule 1f1b --microbatches 8 --steps 3 --eval-batches 0 --verify
        run 90 "verify-llama-recipe-$mode" "$bin/tandem" train --device "$mode" --model llama --layers 4 --heads 4 \
          --kv-heads 2 --actors 2 --data-parallel 2 --schedule 1f1b --microbatches 8 --steps 3 --eval-batches 0 \
          --weight-decay 0.1 --warmup-steps 2 --lr-schedule cosine --clip-grad-norm 1 --verify
      done
      run 90 verify-llama-mixed-bf16 "$bin/tandem" train --device cuda --precision bf16 --model llama --layers 4 \
        --heads 4 --kv-heads 2 --actors 4 --schedule 1f1b --microbatches 8 --steps 3 --eval-batches 0 --verify ;;
    block)
      run 60 block-d256 "$bin/tandem" bench block --device cuda --python "$torchpy"
      run 60 block-d1024 "$bin/tandem" bench block --device cuda --python "$torchpy" --dim 1024 --heads 16 --seq 512 --batch 8
      run 60 block-d1024-composed "$bin/tandem" bench block --device cuda --no-torch --attention composed --dim 1024 \
        --heads 16 --seq 512 --batch 8
      run 60 block-d1024-unfused "$bin/tandem" bench block --device cuda --no-torch --unfused --dim 1024 \
        --heads 16 --seq 512 --batch 8
      run 60 block-d1024-bf16 "$bin/tandem" bench block --device cuda+bf16 --python "$torchpy" --dim 1024 --heads 16 --seq 512 \
        --batch 8
      # The d=2048 target is against PyTorch with its fused attention.
      run 90 block-d2048-bf16 "$bin/tandem" bench block --device cuda+bf16 --python "$torchpy" --torch-sdpa --dim 2048 \
        --heads 16 --seq 2048 --batch 4 --repeats 5 ;;
    gpt)
      run 90 gpt-reference "$bin/tandem" train --device cuda "${G[@]}" --launcher reference --steps 10
      # Each pipelined run also writes the measured trace of its first four
      # steps (the first warms up): per actor, the instructions, the inputs'
      # arrival and the settling, on the host's clock, under $OUT, to read
      # where a step's time goes beyond its instructions.
      run 90 gpt-1actor "$bin/tandem" train --device cuda "${G[@]}" --actors 1 --schedule 1f1b --steps 10 \
        --trace "$OUT/trace-gpt-1actor.json" --trace-steps 4
      run 90 gpt-2actors "$bin/tandem" train --device cuda "${G[@]}" --actors 2 --schedule 1f1b --steps 10 \
        --trace "$OUT/trace-gpt-2actors.json" --trace-steps 4
      run_under_mps 90 gpt-2actors-mps "$bin/tandem" train --device cuda "${G[@]}" --actors 2 --schedule 1f1b --steps 10 \
        --trace "$OUT/trace-gpt-2actors-mps.json" --trace-steps 4
      run 60 gpt-torch "$torchpy" "$scripts/torch_gpt_step.py" --device cuda --dim 256 --heads 8 --seq 128 \
        --batch 8 --layers 8 --microbatches 8 --repeats 10
      run 60 gpt-torch-sdpa-tf32 "$torchpy" "$scripts/torch_gpt_step.py" --device cuda --dim 256 --heads 8 \
        --seq 128 --batch 8 --layers 8 --microbatches 8 --repeats 10 --sdpa --tf32 ;;
    dataplane)
      run 60 dataplane "$bin/tandem" bench dataplane --device cuda
      run_under_mps 60 dataplane-mps "$bin/tandem" bench dataplane --device cuda ;;
    fidelity)
      run 90 fidelity "$bin/tandem" bench fidelity --device cuda --steps 5
      run_under_mps 90 fidelity-mps "$bin/tandem" bench fidelity --device cuda --steps 5 ;;
    profile)
      run 60 profile-d1024 "$bin/tandem" bench block --device cuda --no-torch --profile --repeats 3 --dim 1024 --heads 16 \
        --seq 512 --batch 8
      run 60 profile-d1024-bf16 "$bin/tandem" bench block --device cuda+bf16 --no-torch --profile --repeats 3 --dim 1024 \
        --heads 16 --seq 512 --batch 8
      run 60 profile-d2048-bf16 "$bin/tandem" bench block --device cuda+bf16 --no-torch --profile --repeats 3 --dim 2048 \
        --heads 16 --seq 2048 --batch 4 ;;
    kernels)
      run 120 kernels-gpt2-small "$bin/tandem" bench kernels --device cuda --preset gpt2-small --seq 128 --batch 4 \
        --microbatches 1 --repeats 3 --top 30 ;;
    ncu)
      # The clocks as the card has them (--clock-control none); the warm-up
      # run's three attention launches skipped, the next three read.
      ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
      if [[ -z "$ncu" ]]; then
        table+=("ncu-attention|0|0|no ncu on this node: not read"); echo "=== ncu-attention: no ncu on this node"
      else
        run 90 ncu-attention "$ncu" --clock-control none -k regex:Attention --launch-skip 3 --launch-count 3 \
          --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
          "$bin/tandem" bench block --device cuda --no-torch --repeats 1 --dim 1024 --heads 16 --seq 512 --batch 8
        # The tensor-core kernels (+bf16) at head width 128.
        run 90 ncu-attention-bf16 "$ncu" --clock-control none -k regex:Attention --launch-skip 3 --launch-count 3 \
          --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
          "$bin/tandem" bench block --device cuda+bf16 --no-torch --repeats 1 --dim 2048 --heads 16 --seq 1024 --batch 2
        # Each report's launches side by side, a line each.
        for name in ncu-attention ncu-attention-bf16; do
          [[ -s "$OUT/step-$name.log" ]] || continue
          echo "=== $name, a line a launch:"
          awk -f "$here/ncu_summary.awk" "$OUT/step-$name.log"
        done
      fi ;;
  esac
done

echo
echo "gpu_check: $(( deadline - $(date +%s) )) s before the deadline; log in $log"
printf '%-34s %-7s %8s  %s\n' step status seconds "last line"
failed=0
for row in "${table[@]}"; do
  IFS='|' read -r name rc seconds last <<< "$row"
  [[ "$rc" == 0 ]] || failed=$((failed + 1))
  printf '%-34s %-7s %8s  %s\n' "$name" "$rc" "$seconds" "$last"
done
exit $((failed > 0))
