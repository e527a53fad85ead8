#!/usr/bin/env bash
# The tests of the multithreaded, multiprocess parts under ThreadSanitizer,
# as CI runs them: the `tsan` preset (CMakePresets.json: build-tsan/, -O1
# with line tables, no CUDA, unity batches as the ASan tree's:
# sanitizer_suite.sh), built with warnings as errors, only what those
# tests need (their executables and tandem-actor, which they start), then
# the tests labelled actor (executor, transports, collectives, the actor
# service and process), nccl (the fake NCCL; the real one's are `gpu`),
# backends (the devices, the fake GPU's shared
# memory; not the CPU backend's kernels, label cpu, which the ASan suite
# runs), controller (launchers, pipelines, the REPL's debugger), rpc (the
# control plane) and cuda-on-cpu (the CUDA backend's
# kernels on host threads, backends/cuda/cuda_on_cpu.h: a kernel missing a
# __syncthreads is a race here). A data race or a lock-order
# inversion fails the test that hit it (halt_on_error), in the test's
# process or in an actor process it started. Tests labelled `no_sanitizer`,
# `gpu` or `slurm` are left out.
#
# TSan sees only the synchronization of code built with it, and Debian's
# Abseil, KJ and oneTBB are not: alone, it would take every access that one
# absl::Mutex guards on both sides for a race (236 of 401 tests failed so).
# Three things make it see what they do:
#  - libtandem_tsan_preload.so (tools/ci/tsan_preload.cc), preloaded into
#    every process, annotates absl::Mutex, absl::CondVar,
#    absl::Notification and kj::_::Mutex for TSan;
#  - in this build a kernel's oneTBB pieces run on its calling thread, and
#    a kernel arena's hand-off is annotated (ir/tsan.h);
#  - tools/ci/tsan_suppressions.txt names the one reference count that
#    lives inside KJ (kj::Executor's).
# A lock taken out of InMemoryNetwork::Send, say, is then reported as the
# race it is; tests/tools/tsan_preload_test.sh (label `tsan`, run here too)
# checks that the preload silences each synchronization it annotates and
# that an unsynchronized counter is still reported.
#
#   tools/ci/thread_suite.sh [CTEST_ARGS...]
#
# Environment: TANDEM_JOBS (build and test parallelism, default 2).
set -euo pipefail

cd "$(dirname "$0")/../.."
jobs=${TANDEM_JOBS:-2}

source tools/ci/preset.sh
configure_preset tsan build-tsan
targets=(tandem-actor tandem_tsan_preload)
while read -r target; do
  [[ $target == backends_cuda_graph_runner_on_cpu_test ]] && continue  # not run here (below)
  targets+=("$target")
done < <(ninja -C build-tsan -t targets all | sed -n 's/^\(\(actor\|backends\|controller\|rpc\)_[a-z0-9_]*_test\): .*/\1/p' | grep -v '^backends_cpu_' | sort -u)
targets+=(tsan_preload_probe)
start=$SECONDS
cmake --build build-tsan -j"$jobs" --target "${targets[@]}"
echo "thread_suite: built ${#targets[@]} targets in $((SECONDS - start)) s"

export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tools/ci/tsan_suppressions.txt}
# Abseil's mutexes, made visible (tools/ci/tsan_preload.cc), in
# every test and every actor process they start.
export LD_PRELOAD="$PWD/build-tsan/lib/libtandem_tsan_preload.so${LD_PRELOAD:+:$LD_PRELOAD}"
start=$SECONDS
status=0
# Left out here: the GPT step through the CUDA graph runner on the CPU
# (GraphRunnerOnCpu): it takes 73 s under TSan, and what it adds to the
# kernel tests is the runner's single-threaded host code, which the ASan
# suite covers; and the kernels' bf16 bit comparisons (CudaKernelsOnCpu.
# *OnBf16Give*, 49 s under TSan): a bf16 launch runs the same kernel
# template, with the same barriers and shuffles, as the f32 launches the
# other kernel tests race-check here, and its bits are checked in the plain
# and ASan suites.
ctest --test-dir build-tsan -j"$jobs" --output-on-failure -L '^(actor|nccl|backends|controller|rpc|tsan|cuda-on-cpu)$' \
  -LE '^(no_sanitizer|gpu|slurm|cpu)$' -E '^GraphRunnerOnCpu\.|^CudaKernelsOnCpu\..*OnBf16Give' "$@" || status=$?
echo "thread_suite: tests ran in $((SECONDS - start)) s"
exit "$status"
