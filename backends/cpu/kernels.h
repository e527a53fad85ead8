// CPU reference kernels: the meaning of every IR op (ir/op.h).
//
// EvaluateNode computes one node's result from its operand tensors. These
// kernels are the reference every other backend and every pipelined run is
// compared with bitwise, so they promise:
//   - Deterministic: the same inputs give the same bits, every run, on a
//     given machine and build. Sums run in index order over the summed
//     elements, accumulating in f32 in a plain loop (no pairwise or Kahan
//     summation, no reassociation), so the order is part of the contract.
//   - Threaded without changing a bit: a kernel splits its work over the
//     threads of the oneTBB arena it is called in
//     (backends/cpu/kernel_threads.h) by independent outputs only (elements,
//     rows, tiles of a matmul's result), never a sum (kernels/parallel.h).
//     matmul computes fixed-size tiles of its result, each one cblas_sgemm over
//     the whole contraction on one OpenBLAS thread: pin OpenBLAS to 1
//     (SetBlasThreads) in every process.
//   - f32 math: f32 ops compute in f32. exp and tanh (also inside gelu,
//     gelu_grad and the softmax family) are the kernels' own f32 routines
//     (kernels/float_math.h: IEEE adds, multiplies and divides only, within
//     2 ulp, the same bits on every CPU); log and pow are libm's logf and
//     powf, sqrt is IEEE sqrtf. i32 carries ids and labels; data movement
//     (reshape, transpose, broadcast, slice, concat, pipeline_yield) and
//     convert handle any dtype (ir::MovesAnyDType); arithmetic takes f32 or
//     bf16. f16 is moved but not computed on.
//   - bf16: an arithmetic op with a bf16 operand or result is the f32
//     kernel on its operands widened exactly, its result rounded to bf16
//     (round to nearest even, ir/dtype.h's FloatToBf16) once. So a fused
//     op (softmax, layer_norm, matmul, cross_entropy, a reduction) keeps
//     f32 inside, and only what it returns is bf16; the CUDA runner does
//     the same with its own f32 kernels.
//
// Documented choices where ir/op.h leaves room:
//   - relu(x) = x < 0 ? 0 : x (NaN passes through); maximum(x, y) returns
//     NaN when either side is NaN, else the larger (x on ties); reduce_max
//     propagates NaN and gives -inf over zero elements.
//   - convert f32 -> i32 truncates toward zero, saturating at the i32 range;
//     NaN becomes 0. f32 -> bf16 rounds to nearest even (FloatToBf16),
//     bf16 -> f32 is exact, bf16 <-> i32 goes through f32.
//   - gelu(x) = 0.5f * x * (1 + tanh(k * (x + 0.044715f * x * x * x))),
//     k = sqrt(2/pi) in f32, and gelu_grad its exact derivative
//     0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 * 0.044715 x^2), t as above.
//   - normalize: mean = sum(x) / N, var = sum((x - mean)^2) / N (biased),
//     rstd = 1 / sqrtf(var + eps), xhat = (x - mean) * rstd; layer_norm
//     computes exactly xhat * gamma, rounded, then + beta, rounded, so it
//     matches normalize -> mul -> add bit for bit. normalize_grad is
//     rstd * ((dy - mean(dy)) - xhat * mean(dy * xhat)).
//   - The softmax family subtracts the row max first; softmax divides each
//     exp by the row sum; log_softmax is (x - max) - log(sum);
//     cross_entropy is log(sum(exp(x - max))) - (x[label] - max).
//   - reshape and pipeline_yield return a tensor sharing the operand's
//     storage; every other kernel writes a fresh tensor.
//
// Thread-safety: EvaluateNode only reads its operands, so calls on
// different nodes may run concurrently (subject to OpenBLAS's own rules).
#ifndef TANDEM_BACKENDS_CPU_KERNELS_H_
#define TANDEM_BACKENDS_CPU_KERNELS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ir/graph.h"
#include "ir/host_tensor.h"

namespace tandem::cpu {

// The result of `node` (of type node.type, already inferred) applied to
// `operands`, one tensor per node.operands entry, in order. Errors:
//   - InvalidArgument for data-dependent failures, naming the op and the bad
//     value and position, e.g. "embedding: id 70 at position 3 outside
//     [0, 65)" (embedding, embedding_grad ids; cross_entropy and
//     cross_entropy_grad labels).
//   - Internal when the node is not a kernel (input) or when operand types
//     do not fit the node (a graph the verifier should have rejected),
//     including arithmetic on a dtype other than f32 and bf16.
//   - Unimplemented for constant and convert with f16.
// A wrong operand count is a bug of the caller and aborts.
absl::StatusOr<ir::HostTensor> EvaluateNode(const ir::Node& node, absl::Span<const ir::HostTensor* const> operands);

// Sets the number of threads OpenBLAS uses inside one GEMM call
// (process-wide: it is OpenBLAS's own setting). matmul's tiles assume 1: the
// kernels' own threads come from the arena (backends/cpu/kernel_threads.h).
void SetBlasThreads(int num_threads);

// Which BLAS kernels matmul runs and what chose them, e.g. "OpenBLAS
// 0.3.21 ..., SkylakeX kernels (chosen by the CPU's features)"
// (kernels/blas.h); loads OpenBLAS if nothing has yet.
std::string BlasDescription();

}  // namespace tandem::cpu

#endif  // TANDEM_BACKENDS_CPU_KERNELS_H_
