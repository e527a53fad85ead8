#!/usr/bin/env bash
# tools/ncu_summary.awk: a line a kernel launch of an Nsight Compute text
# report (the sections gpu_check.sh asks for), its figures in the columns
# named, durations in microseconds whatever unit ncu chose, a figure the
# report lacks as "-", and the program's own output between reports ignored.
#
#   ncu_summary_test.sh SOURCE_DIR
set -u
source_dir=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() { echo "ncu summary test FAILED: $*" >&2; exit 1; }

# Two launches in ncu's layout (values made up); the second has no
# occupancy section and a duration in milliseconds.
cat >"$work/report" <<'REPORT'
==PROF== Connected to process 3582 (/tmp/tb/bin/tandem)
==PROF== Profiling "AttentionMmaKernel": 0%....50%....100% - 17 passes
GPT block forward+backward: dim 2048, seq 1024, batch 2, heads 16
  tandem (cuda:0+bf16)                       1789.1
  void <unnamed>::tensor_cores::AttentionMmaKernel<128, float>(const __nv_bfloat16 *, AttentionGeometry, long) (512, 1, 1)x(128, 1, 1), Context 1, Stream 13, Device 0, CC 9.0
    Section: GPU Speed Of Light Throughput
    ----------------------- ----------- ------------
    Metric Name             Metric Unit Metric Value
    ----------------------- ----------- ------------
    Memory Throughput                 %        47.72
    DRAM Throughput                   %        10.56
    Duration                         us        51.30
    L1/TEX Cache Throughput           %        51.67
    Compute (SM) Throughput           %        46.39
    ----------------------- ----------- ------------
    Section: Launch Statistics
    Registers Per Thread             register/thread             247
    Section: Occupancy
    Achieved Occupancy                        %        12.23
  void <unnamed>::tensor_cores::AttentionKeyGradMmaKernel<64, __nv_bfloat16>(const __nv_bfloat16 *, long) (1024, 1, 1)x(64, 1, 1), Context 1, Stream 13, Device 0, CC 9.0
    Section: GPU Speed Of Light Throughput
    Memory Throughput                 %        48.75
    Duration                         ms         1.25
    L1/TEX Cache Throughput           %        51.98
    Compute (SM) Throughput           %        30.51
    Section: Launch Statistics
    Registers Per Thread             register/thread             255
==PROF== Disconnected from process 3582
REPORT

awk -f "$source_dir/tools/ncu_summary.awk" "$work/report" >"$work/out" 2>&1 || { cat "$work/out"; fail "awk failed"; }
cat "$work/out"
(( $(wc -l <"$work/out") == 3 )) || fail "not a header and a line a launch"
read -r -a first <<<"$(sed -n 2p "$work/out")"
[[ "${first[*]:0:9}" == "AttentionMmaKernel<128, float> 51.30 247 12.23 46.39 47.72 51.67 (512," ]] ||
  fail "the first launch's figures: ${first[*]}"
read -r -a second <<<"$(sed -n 3p "$work/out")"
[[ "${second[*]:0:8}" == "AttentionKeyGradMmaKernel<64, __nv_bfloat16> 1250.00 255 - 30.51 48.75 51.98" ]] ||
  fail "the second launch's figures (ms to us, no occupancy): ${second[*]}"
[[ "$(sed -n 3p "$work/out")" == *"(1024, 1, 1)x(64, 1, 1)" ]] || fail "the second launch's grid and block"
echo "ncu summary test passed"
