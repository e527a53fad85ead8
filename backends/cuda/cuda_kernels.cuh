// The device kernels of the CUDA backend: one launcher per op family, used
// by CudaGraphRunner (cuda_graph_runner.cu). Internal to backends/cuda/.
//
// Each launcher enqueues its kernel on `stream` and returns the launch's
// cudaError_t (cudaGetLastError right after the launch); execution errors
// surface at the runner's next synchronization. A launch with zero elements
// (or rows) enqueues nothing. Pointers are device pointers; shapes, strides
// and attributes are plain values computed on the host.
//
// The kernels compute the functions of the CPU reference kernels
// (backends/cpu/kernels.h) in f32, with CUDA's libdevice exp/tanh/log/pow in
// place of the reference's own routines, so results agree within a few ulp per
// op. They are built with --fmad=false: every multiply and add of our own code
// is rounded as written, as in the reference (libdevice's routines use FMA
// inside, which is part of their few ulp).
// Deterministic by construction: no atomics, and every sum or max runs in
// an order fixed by the shape alone (each thread's strided share in index
// order, then a fixed binary tree over the threads), so the same inputs
// give the same bits on every run, in every process. The order is not the
// reference's single loop, so a sum agrees with it within rounding.
//
// Of the IR only ir/op.h, whose OpKind names the op of a unary or binary
// kernel: a new elementwise op is one case in ApplyUnary or ApplyBinary
// (kernels/elementwise.cu) and nothing else here. The kernels live by
// family in kernels/: elementwise.cu, reductions.cu (with the row kernels),
// lookups.cu (ids and labels) and attention.cu (rotary and attention). No
// Abseil: the runner translates IR nodes into these calls and cudaError_t
// into absl::Status.
#ifndef TANDEM_BACKENDS_CUDA_CUDA_KERNELS_CUH_
#define TANDEM_BACKENDS_CUDA_CUDA_KERNELS_CUH_

#include <cstdint>

#include "ir/op.h"

// One kernel source, two compilers: nvcc, and the host compiler with
// CUDA's execution model on host threads (cuda_on_cpu.h), where every
// kernel is tested against the CPU reference. A launch is written
// TANDEM_LAUNCH(kernel, grid, block, shared_bytes, stream)(args...).
#ifdef TANDEM_CUDA_ON_CPU
#include "backends/cuda/cuda_on_cpu.h"
#else
#include <cuda_runtime_api.h>
#define TANDEM_LAUNCH(kernel, grid, block, shared_bytes, stream) kernel<<<grid, block, shared_bytes, stream>>>
#endif

namespace tandem::cuda::kernels {

// Enough for every model we trace (attention uses rank 4); the runner merges
// axes before filling a StridedMap and refuses ranks beyond this.
inline constexpr int kMaxRank = 8;
inline constexpr int kMaxOperands = 3;

// Maps the flat index of a row-major output of `extents` to the element
// offset of each operand: offset = sum over axes of index[axis] *
// strides[operand][axis]. A stride of 0 repeats the operand along the axis
// (broadcasting); permuted strides express a transpose. Passed to kernels by
// value.
struct StridedMap {
  int rank = 0;          // 0: a single element
  int num_operands = 0;  // <= kMaxOperands
  int64_t extents[kMaxRank] = {};
  int64_t strides[kMaxOperands][kMaxRank] = {};
};

// A reduction: output element o starts at the input offset `kept` maps o to
// (one operand) and folds the input elements at base + sum(index[axis] *
// reduced_strides[axis]) in row-major order of `reduced_extents`.
struct ReductionPlan {
  int64_t num_outputs = 0;
  StridedMap kept;
  int reduced_rank = 0;
  int64_t reduced_extents[kMaxRank] = {};
  int64_t reduced_strides[kMaxRank] = {};
  float reduced_count = 1.0f;  // the divisor of reduce_mean
};

enum class ReduceOp : int { kSum, kMean, kMax };
// Row-wise over the last axis; the grads take (y, dy).
enum class RowOp : int { kSoftmax, kLogSoftmax, kSoftmaxGrad, kLogSoftmaxGrad };
enum class NormOp : int { kNormalize, kLayerNorm, kNormalizeGrad };
enum class ConvertOp : int { kF32ToI32, kI32ToF32, kF32ToBf16, kBf16ToF32, kBf16ToI32, kI32ToBf16 };

// Where LaunchFindFirstOutOfRange leaves its answer: `position` is the
// first index i with values[i] outside [0, limit), or -1; `value` is
// values[position].
struct RangeCheckResult {
  int64_t position;
  int32_t value;
  int32_t unused;
};

// out[i] = the low `element_size` bytes of `bits` (4: a constant of f32 or
// i32; 2: of bf16).
cudaError_t LaunchFill(uint32_t bits, int element_size, void* out, int64_t n, cudaStream_t stream);

// The operands and result of an elementwise kernel: f32 or bf16 storage.
// The kernels compute in f32 either way: a bf16 operand is widened exactly
// as it is loaded and a bf16 result rounded once, to nearest even, as it is
// stored, so one kernel gives the bits of widening, the f32 kernel and
// narrowing (the reference's rule for bf16, backends/cpu/kernels.h).
struct ElementsIn {
  const void* data = nullptr;
  bool bf16 = false;
};
struct ElementsOut {
  void* data = nullptr;
  bool bf16 = false;
};

// `op` is of the unary family (ir/op_def.h).
cudaError_t LaunchUnary(ir::OpKind op, ElementsIn x, ElementsOut out, int64_t n, cudaStream_t stream);

// `op` is of the binary family: (x, y) -> out, where gelu_grad, silu_grad
// and relu_grad take (x, dy). out has map.extents; map has two operands.
cudaError_t LaunchBinary(ir::OpKind op, ElementsIn x, ElementsIn y, ElementsOut out, const StridedMap& map,
                         cudaStream_t stream);

// A run of elementwise nodes evaluated in one kernel (ir/elementwise_runs.h):
// each thread takes 4 consecutive elements through the run's steps in
// order, keeping each step's values in registers, and stores only the steps
// whose `out` is set. A step computes ApplyUnary or ApplyBinary on f32 values exactly as
// its node's kernel would, and a step of a bf16 node rounds its value to
// bf16 before later steps read it, as they would load it from memory; so
// every stored value has the bits of node-by-node evaluation.
inline constexpr int kMaxFusedSteps = 16;
inline constexpr int kMaxFusedInputs = 16;
struct FusedInput {
  const void* data = nullptr;
  bool bf16 = false;
  // Read at element i % period: the run's elements for a tensor of its
  // shape, 1 for one value, a bias's elements for one repeated along the
  // run's leading axes.
  int64_t period = 1;
};
struct FusedStep {
  ir::OpKind op = ir::OpKind::kNeg;  // of the unary or binary family
  int arity = 1;
  // Operand k: an earlier step's value (>= 0) or input -1 - operands[k].
  int operands[2] = {0, 0};
  bool bf16 = false;     // the node is bf16: its value is rounded to bf16
  void* out = nullptr;   // where its values are stored (f32 or bf16), or null
};
struct FusedProgram {
  int num_inputs = 0;
  int num_steps = 0;
  FusedInput inputs[kMaxFusedInputs];
  FusedStep steps[kMaxFusedSteps];
};
// cudaErrorInvalidValue for a program out of those bounds or an operand
// that is not an input or an earlier step.
cudaError_t LaunchFused(const FusedProgram& program, int64_t n, cudaStream_t stream);

// out = cond != 0 ? x : y; map has three operands (cond, x, y).
cudaError_t LaunchWhere(ElementsIn cond, ElementsIn x, ElementsIn y, ElementsOut out, const StridedMap& map,
                        cudaStream_t stream);

// As the reference kernels convert (backends/cpu/kernels.h): f32 -> i32
// truncates toward zero, saturates, and maps NaN to 0; to bf16 rounds to
// nearest even; bf16 <-> i32 goes through f32.
cudaError_t LaunchConvert(ConvertOp op, const void* in, void* out, int64_t n,
                          cudaStream_t stream);

// f32 -> bf16, round to nearest even: the operands of a bf16 matmul.
cudaError_t LaunchToBf16(const float* in, void* out, int64_t n, cudaStream_t stream);

// out[i] = in[offset of i under map (one operand)], for elements of
// `element_size` bytes (2 or 4): transpose and broadcast.
cudaError_t LaunchGather(const void* in, void* out, int element_size, const StridedMap& map,
                         cudaStream_t stream);

// Copies `rows` rows of `row_length` elements from src (rows
// `src_row_stride` elements apart) to dst (rows `dst_row_stride` apart):
// slice and each operand of concat.
cudaError_t LaunchCopyRows(const void* src, int64_t src_row_stride, void* dst,
                           int64_t dst_row_stride, int64_t rows, int64_t row_length,
                           int element_size, cudaStream_t stream);

// A few outputs over many elements (a full reduction: the loss's mean, a
// gradient's squared norm) take two passes, each output's elements cut into
// chunks of a fixed length folded by blocks of their own, then the chunks'
// results folded in order; the partial results live in `scratch`:
// ReduceScratchBytes(plan) bytes of device memory (0: one pass, scratch
// unused), free until the launch's work is done.
size_t ReduceScratchBytes(const ReductionPlan& plan);

// The reductions and every kernel below that takes ElementsIn (softmax
// family, normalization, causal mask, rotary, attention, embedding) take f32
// or bf16 storage as the elementwise kernels do: bf16 widened as it is
// loaded, every fold, partial and intermediate in f32, the result rounded
// once as it is stored: the bits of widening, the f32 kernel and narrowing.
cudaError_t LaunchReduce(ReduceOp op, ElementsIn x, ElementsOut out, const ReductionPlan& plan, void* scratch,
                         cudaStream_t stream);

// x (or y) and dy are [rows, length]; dy is unused by softmax/log_softmax.
cudaError_t LaunchRows(RowOp op, ElementsIn x, ElementsIn dy, ElementsOut out, int64_t rows, int64_t length,
                       cudaStream_t stream);

// normalize(x), layer_norm(x, gamma = second, beta), normalize_grad(x, dy =
// second); x and out are [rows, length].
cudaError_t LaunchNormalization(NormOp op, ElementsIn x, ElementsIn second, ElementsIn beta, ElementsOut out,
                                int64_t rows, int64_t length, float eps, cudaStream_t stream);

// x and out are `matrices` matrices of [rows, cols]; entries above the
// diagonal become fill.
cudaError_t LaunchCausalMask(ElementsIn x, ElementsOut out, int64_t matrices, int64_t rows, int64_t cols, float fill,
                             cudaStream_t stream);

// x and out are `matrices` matrices of [positions, width] (width even):
// the rotary embedding of ir/op.h, angles as the reference computes them
// (backends/cpu/kernels/rotary.cc); `inverse` rotates by the opposite angle.
// A row's position is its index in its matrix, or its entry of `given`
// (null, or a position per row, each at least 0).
cudaError_t LaunchRotary(ElementsIn x, const int32_t* given, ElementsOut out, int64_t matrices, int64_t positions,
                         int64_t width, double theta, bool inverse, cudaStream_t stream);

// Causal attention (ir/op.h kAttention): q and out [batch, heads, seq,
// width], k and v [batch, kv_heads, keys, width], query head h reading
// key/value head h / (heads / kv_heads); query row i reads keys 0..i (keys
// == seq), or 0..positions[b, i] (positions [batch, seq], each in [0, keys)).
// In FlashAttention-2's manner (kernels/attention.cu), the scores
// recomputed in each pass, never stored (no S x T buffer). q, k and v are
// all f32 or all bf16 (else cudaErrorInvalidValue). bf16 at head widths 32,
// 64 and 128 on 16-byte-aligned operands runs on tensor cores (bf16
// products, f32 accumulation, the weights rounded to bf16), its result bf16
// or f32 (the precision +bf16's attention on narrowed operands); otherwise
// out has their dtype and the kernels are fp32 SIMT (bf16 widened as it is
// loaded, the result rounded once): small matrix products of 32 query rows
// by 32 keys at head widths 32 and 64, a group of lanes per row at 128, a
// thread per row otherwise.
bool AttentionOnTensorCores(int64_t width);
cudaError_t LaunchAttention(ElementsIn q, ElementsIn k, ElementsIn v, const int32_t* positions, ElementsOut out,
                            int64_t batch, int64_t heads, int64_t kv_heads, int64_t seq, int64_t keys, int64_t width,
                            float scale, cudaStream_t stream);
// Its gradient for the cotangent dy [as q] into dq [as q], dk and dv [as k]:
// query rows for dq first, leaving each row's softmax statistics in
// `scratch` (AttentionGradScratchBytes(batch * heads * seq) bytes of device
// memory, free until the launch's work is done), then key rows for dk and
// dv, each summing over its query heads and rows in an order fixed by the
// shape. Dtypes as the forward's: dq, dk and dv share one, the operands'
// or (bf16 operands on tensor cores) f32.
size_t AttentionGradScratchBytes(int64_t query_rows);
cudaError_t LaunchAttentionGrad(ElementsIn q, ElementsIn k, ElementsIn v, ElementsIn dy, ElementsOut dq,
                                ElementsOut dk, ElementsOut dv, int64_t batch, int64_t heads, int64_t kv_heads,
                                int64_t seq, int64_t width, float scale, void* scratch, cudaStream_t stream);

// One block scans values[0, n) and writes *result (see RangeCheckResult).
cudaError_t LaunchFindFirstOutOfRange(const int32_t* values, int64_t n, int64_t limit,
                                      RangeCheckResult* result, cudaStream_t stream);

// logits [rows, classes], labels [rows]. A label outside [0, classes) gives
// NaN (loss) or a NaN row (grad): the runner reports it from the range
// check, so those values are never seen.
cudaError_t LaunchCrossEntropy(const float* logits, const int32_t* labels, float* loss,
                               int64_t rows, int64_t classes, cudaStream_t stream);
cudaError_t LaunchCrossEntropyGrad(const float* logits, const int32_t* labels, const float* dy,
                                   float* out, int64_t rows, int64_t classes,
                                   cudaStream_t stream);

// table [num_rows, width], ids [positions] -> out [positions, width]. An id
// out of range gives a zero row (reported by the range check).
cudaError_t LaunchEmbedding(ElementsIn table, const int32_t* ids, ElementsOut out, int64_t positions,
                            int64_t num_rows, int64_t width, cudaStream_t stream);
// ids [positions], dy [positions, width] -> out [num_rows, width]: each
// output element sums the dy entries of its row's ids in position order
// (the reference's bits). Out-of-range ids match no row. O(positions *
// width) work after a stable radix sort of the ids, in `scratch`: device
// memory of EmbeddingGradScratchBytes(positions) bytes, free until the
// launch's work is done. positions must fit in an int32.
size_t EmbeddingGradScratchBytes(int64_t positions);
cudaError_t LaunchEmbeddingGrad(const int32_t* ids, ElementsIn dy, ElementsOut out, int64_t positions,
                                int64_t num_rows, int64_t width, void* scratch, cudaStream_t stream);

// out[i] = ((slots[i] + slots[stride + i]) + slots[2 stride + i]) + ... over
// `count` slots, in slot order with round-to-nearest adds: the bits of
// ir::SumInReplicaOrder (the data-parallel all-reduce's ordered sum).
cudaError_t LaunchSumInOrder(const float* slots, int64_t stride, int32_t count, float* out, int64_t n,
                             cudaStream_t stream);

}  // namespace tandem::cuda::kernels

#endif  // TANDEM_BACKENDS_CUDA_CUDA_KERNELS_CUH_
