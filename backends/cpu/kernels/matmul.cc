// The matmul kernel: cblas_sgemm from OpenBLAS (blas.h: its kernels chosen
// by the CPU's features), row-major, with the transpose flags passed to
// BLAS (no transposed copies are made).
//
// Threads: each product is cut into tiles of C (kTileRows x kTileCols, the
// last ones smaller), and each tile is its own single-threaded sgemm over
// the whole contraction, on the enclosing arena's threads (parallel.h).
// The tiles depend on the shape alone, so the bits do not depend on the
// thread count. OpenBLAS must be pinned to one thread (SetBlasThreads).
//
// Batch modes: equal batch axes on both sides (one gemm per batch entry), or
// one rank-2 operand reused for every batch entry of the other. When b is the
// rank-2 operand and a is not transposed, a's batch axes fold into M and the
// whole product is ONE gemm: a[B..., M, K] is a row-major [B*M, K] matrix.
#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/kernels/blas.h"
#include "backends/cpu/kernels/kernel_support.h"
#include "backends/cpu/kernels/parallel.h"

namespace tandem::cpu {
namespace internal {
namespace {

// The tiles of C: rows and columns per tile. Tall-skinny and short-wide
// products still cut into several tiles; a product below kMinTiledFlops is
// one tile.
constexpr int64_t kTileRows = 128;
constexpr int64_t kTileCols = 256;
constexpr int64_t kMinTiledFlops = int64_t{1} << 21;

// c[rows, cols] of one tile = op(a) op(b) restricted to them; leading
// dimensions are the whole operands'.
void GemmTile(bool transpose_a, bool transpose_b, int64_t rows, int64_t cols, int64_t k, const float* a,
              int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc) {
  GetBlas().sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans, transpose_b ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(rows), static_cast<blasint>(cols), static_cast<blasint>(k), 1.0f, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), 0.0f, c, static_cast<blasint>(ldc));
}

// One row-major product c[m, n] = op(a) op(b), op a transpose where flagged,
// tile by tile.
void Gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, const float* a,
          const float* b, float* c) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum: c was not zeroed (AllocateOverwrittenResult)
    std::fill_n(c, m * n, 0.0f);
    return;
  }
  const int64_t lda = transpose_a ? m : k;
  const int64_t ldb = transpose_b ? k : n;
  const bool tiled = 2 * m * n * k >= kMinTiledFlops;
  const int64_t tile_rows = tiled ? kTileRows : m;
  const int64_t tile_cols = tiled ? kTileCols : n;
  const int64_t row_tiles = (m + tile_rows - 1) / tile_rows;
  const int64_t col_tiles = (n + tile_cols - 1) / tile_cols;
  ParallelFor(row_tiles * col_tiles, 1, [&](int64_t begin, int64_t end) {
    for (int64_t tile = begin; tile < end; ++tile) {
      const int64_t row = (tile / col_tiles) * tile_rows;
      const int64_t col = (tile % col_tiles) * tile_cols;
      // op(a)'s rows [row, row + rows) and op(b)'s columns [col, col + cols).
      const float* a_tile = transpose_a ? a + row : a + row * k;
      const float* b_tile = transpose_b ? b + col * k : b + col;
      GemmTile(transpose_a, transpose_b, std::min(tile_rows, m - row), std::min(tile_cols, n - col), k, a_tile,
               lda, b_tile, ldb, c + row * n + col, n);
    }
  });
}

ir::Shape BatchOf(const ir::Shape& shape) { return ir::Shape(shape.begin(), shape.end() - 2); }

absl::StatusOr<ir::HostTensor> MatMul(const ir::Node& node, Operands operands) {
  for (int i = 0; i < 2; ++i) {
    if (absl::Status s = ExpectDType(node, operands, i, ir::DType::kF32); !s.ok()) return s;
  }
  if (absl::Status s = ExpectResultDType(node, ir::DType::kF32); !s.ok()) return s;
  const ir::HostTensor& a = *operands[0];
  const ir::HostTensor& b = *operands[1];
  const bool transpose_a = node.attributes.GetIntOr("transpose_a", 0) != 0;
  const bool transpose_b = node.attributes.GetIntOr("transpose_b", 0) != 0;
  const ir::Shape& a_shape = a.shape();
  const ir::Shape& b_shape = b.shape();
  const auto mismatch = [&](absl::string_view why) {
    return KernelTypeError(
        node, absl::StrCat(why, ": ", ir::TypeToString(a.type()), transpose_a ? "^T" : "", " x ",
                           ir::TypeToString(b.type()), transpose_b ? "^T" : "", " -> ", ir::TypeToString(node.type)));
  };
  if (a_shape.size() < 2 || b_shape.size() < 2) return mismatch("operands need rank >= 2");
  const size_t ra = a_shape.size();
  const size_t rb = b_shape.size();
  const int64_t m = transpose_a ? a_shape[ra - 1] : a_shape[ra - 2];
  const int64_t k = transpose_a ? a_shape[ra - 2] : a_shape[ra - 1];
  const int64_t kb = transpose_b ? b_shape[rb - 1] : b_shape[rb - 2];
  const int64_t n = transpose_b ? b_shape[rb - 2] : b_shape[rb - 1];
  if (k != kb) return mismatch("contracting extents differ");
  ir::Shape batch;
  if (ra == 2) {
    batch = BatchOf(b_shape);
  } else if (rb == 2 || BatchOf(a_shape) == BatchOf(b_shape)) {
    batch = BatchOf(a_shape);
  } else {
    return mismatch("batch axes differ");
  }
  ir::Shape expected = batch;
  expected.push_back(m);
  expected.push_back(n);
  if (expected != node.type.shape) return mismatch("result shape does not match");

  absl::StatusOr<ir::HostTensor> allocated = AllocateOverwrittenResult(node);
  if (!allocated.ok()) return allocated.status();
  ir::HostTensor out = *std::move(allocated);
  const int64_t batch_count = ir::NumElements(batch);
  const float* a_data = a.f32();
  const float* b_data = b.f32();
  float* c_data = out.f32();
  if (ra > 2 && rb == 2 && !transpose_a) {
    Gemm(false, transpose_b, batch_count * m, n, k, a_data, b_data, c_data);
    return out;
  }
  const int64_t a_step = ra == 2 ? 0 : m * k;
  const int64_t b_step = rb == 2 ? 0 : k * n;
  // Batch entries are independent products: one piece each (and each may
  // cut into tiles of its own).
  ParallelFor(batch_count, 1, [&](int64_t begin, int64_t end) {
    for (int64_t entry = begin; entry < end; ++entry) {
      Gemm(transpose_a, transpose_b, m, n, k, a_data + entry * a_step, b_data + entry * b_step,
           c_data + entry * m * n);
    }
  });
  return out;
}

}  // namespace

absl::StatusOr<ir::HostTensor> EvaluateMatMul(const ir::Node& node, Operands operands) {
  if (node.op != ir::OpKind::kMatMul) {
    KernelBug(absl::StrCat("EvaluateMatMul: ", OpName(node.op), " is not matmul"));
  }
  return MatMul(node, operands);
}

}  // namespace internal

void SetBlasThreads(int num_threads) { internal::GetBlas().set_num_threads(num_threads); }

std::string BlasDescription() {
  const internal::Blas& blas = internal::GetBlas();
  return absl::StrCat(blas.config, ", ", blas.core, " kernels (chosen by ", blas.chosen_by, ")");
}

}  // namespace tandem::cpu
