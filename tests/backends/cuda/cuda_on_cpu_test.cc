// CUDA's execution model on the CPU (backends/cuda/cuda_on_cpu.h): indices,
// __shared__ memory and __syncthreads, warp shuffles, wmma's tensor-core
// products, the PTX-level products and loads (kernels/warp_mma.cuh),
// atomics and launch limits behave as CUDA defines them; a divergent barrier
// aborts naming itself instead of hanging; a wmma load or ldmatrix the GPU
// cannot take aborts; and under ThreadSanitizer a kernel missing a
// __syncthreads is reported as the race it is.
#include "backends/cuda/cuda_on_cpu.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backends/cuda/kernels/warp_mma.cuh"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace {

constexpr cudaStream_t kStream = nullptr;

// Each thread writes its block and thread index, and the grid's and
// block's sizes, into its slot.
__global__ void WhereAmI(uint32_t* out) {
  const unsigned block = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  const unsigned thread = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  uint32_t* slot = out + 4 * (block * blockDim.x * blockDim.y * blockDim.z + thread);
  slot[0] = block;
  slot[1] = thread;
  slot[2] = gridDim.x * gridDim.y * gridDim.z;
  slot[3] = blockDim.x * blockDim.y * blockDim.z;
}

TEST(CudaOnCpu, EveryThreadOfEveryBlockRunsOnceWithItsIndices) {
  const dim3 grid(3, 2, 1), block(5, 4, 2);
  std::vector<uint32_t> out(4 * 6 * 40, 0xffffffffu);
  TANDEM_LAUNCH(WhereAmI, grid, block, 0, kStream)(out.data());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  for (uint32_t block_index = 0; block_index < 6; ++block_index) {
    for (uint32_t thread = 0; thread < 40; ++thread) {
      const uint32_t* slot = &out[4 * (block_index * 40 + thread)];
      EXPECT_EQ(slot[0], block_index);
      EXPECT_EQ(slot[1], thread);
      EXPECT_EQ(slot[2], 6u);
      EXPECT_EQ(slot[3], 40u);
    }
  }
}

TEST(CudaOnCpu, LaunchesOutsideCudasLimitsAreRefusedAsCudaRefusesThem) {
  std::vector<uint32_t> out(4 * 2048);
  TANDEM_LAUNCH(WhereAmI, 1, 2048, 0, kStream)(out.data());
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration) << "more than 1024 threads a block";
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "reading the error clears it";
  TANDEM_LAUNCH(WhereAmI, 0, 32, 0, kStream)(out.data());
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration) << "an empty grid";
  TANDEM_LAUNCH(WhereAmI, 1, 32, 1024, kStream)(out.data());
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue) << "dynamic shared memory is not modelled";
}

// A block's fold through __shared__ memory: the tree of the backend's
// kernels, partial[t] += partial[t + half].
__global__ void BlockSum(const float* x, float* out) {
  __shared__ float partial[256];
  partial[threadIdx.x] = x[blockIdx.x * blockDim.x + threadIdx.x];
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}

// Each thread stages its element and reads its neighbour's: correct with
// the __syncthreads between, a race without it. (Each staged value sits in
// its own 8 bytes, so ThreadSanitizer keeps both accesses to it and reports
// the race every time; in a tree fold, where many threads touch one word,
// its bounded history may miss one.)
template <bool kBarrier>
__global__ void RotateByOne(const float* x, float* out) {
  __shared__ double staged[256];
  staged[threadIdx.x] = x[threadIdx.x];
  if (kBarrier) __syncthreads();
  out[threadIdx.x] = static_cast<float>(staged[(threadIdx.x + 1) % blockDim.x]);
}

// The tree of BlockSum on the host.
float TreeSum(const float* x, int count) {
  std::vector<float> partial(x, x + count);
  for (int half = count / 2; half > 0; half /= 2) {
    for (int t = 0; t < half; ++t) partial[static_cast<size_t>(t)] += partial[static_cast<size_t>(t + half)];
  }
  return partial[0];
}

std::vector<float> Values(int count) {
  std::vector<float> values(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) values[static_cast<size_t>(i)] = 1.0f / static_cast<float>(i % 97 + 1) - 0.3f;
  return values;
}

TEST(CudaOnCpu, SharedMemoryAndSyncThreadsFoldEachBlockInTheTreesOrder) {
  const std::vector<float> x = Values(3 * 256);
  std::vector<float> out(3, 0.0f);
  TANDEM_LAUNCH(BlockSum, 3, 256, 0, kStream)(x.data(), out.data());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  for (int block = 0; block < 3; ++block) {
    const float expected = TreeSum(x.data() + block * 256, 256);
    EXPECT_EQ(std::memcmp(&out[static_cast<size_t>(block)], &expected, 4), 0) << "block " << block;
  }
}

// A warp's sum by __shfl_down_sync (offsets 16, 8, ..., 1); lane 0 writes
// it. The last warp of a 40-thread block has 8 lanes: a lane whose source
// is past the warp's end keeps its own value.
__global__ void WarpSums(const float* x, float* out) {
  float value = x[blockIdx.x * blockDim.x + threadIdx.x];
  for (int offset = 16; offset > 0; offset /= 2) {
    const unsigned lanes = blockDim.x - threadIdx.x / 32 * 32 < 32 ? blockDim.x - threadIdx.x / 32 * 32 : 32;
    const unsigned mask = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1u;
    value += __shfl_down_sync(mask, value, offset);
  }
  if (threadIdx.x % 32 == 0) out[blockIdx.x * 2 + threadIdx.x / 32] = value;
}

TEST(CudaOnCpu, WarpShufflesFoldInTheOrderTheirOffsetsGive) {
  const std::vector<float> x = Values(2 * 40);
  std::vector<float> out(4, 0.0f);
  TANDEM_LAUNCH(WarpSums, 2, 40, 0, kStream)(x.data(), out.data());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  for (int block = 0; block < 2; ++block) {
    for (int warp = 0; warp < 2; ++warp) {
      const int lanes = warp == 0 ? 32 : 8;
      std::vector<float> value(x.begin() + block * 40 + warp * 32, x.begin() + block * 40 + warp * 32 + lanes);
      for (int offset = 16; offset > 0; offset /= 2) {
        std::vector<float> next = value;
        for (int lane = 0; lane < lanes; ++lane) {
          const float source = lane + offset < lanes ? value[static_cast<size_t>(lane + offset)]
                                                     : value[static_cast<size_t>(lane)];
          next[static_cast<size_t>(lane)] = value[static_cast<size_t>(lane)] + source;
        }
        value = next;
      }
      EXPECT_EQ(std::memcmp(&out[static_cast<size_t>(block * 2 + warp)], &value[0], 4), 0)
          << "block " << block << " warp " << warp;
    }
  }
}

__global__ void CountAndMax(int* count, int* most) {
  atomicAdd(count, 1);
  atomicMax(most, static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x));
}

TEST(CudaOnCpu, AtomicsSeeEveryThread) {
  int count = 0, most = -1;
  TANDEM_LAUNCH(CountAndMax, 4, 96, 0, kStream)(&count, &most);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(count, 4 * 96);
  EXPECT_EQ(most, 4 * 96 - 1);
}

// One warp's tensor-core products through wmma (16 x 16 x 16, bf16
// operands, f32 accumulators): d = a b + c with b read row-major and,
// from its transpose, column-major; c read row-major, the second product
// stored column-major; and the rows of c scaled through a fragment of row
// numbers, which works because fragments of one type share their layout.
__global__ void WarpProducts(const __nv_bfloat16* a, const __nv_bfloat16* b, const float* c, float* out) {
  namespace wmma = nvcuda::wmma;
  __shared__ __align__(32) __nv_bfloat16 sa[256], sb[256], sbt[256];
  __shared__ __align__(32) float sc[256], rows[256], d[3][256];
  for (int e = static_cast<int>(threadIdx.x); e < 256; e += 32) {
    sa[e] = a[e];
    sb[e] = b[e];
    sbt[e % 16 * 16 + e / 16] = b[e];
    sc[e] = c[e];
    rows[e] = static_cast<float>(e / 16);
  }
  __syncwarp();
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fb;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fbt;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc, fd, row_of;
  wmma::load_matrix_sync(fa, sa, 16);
  wmma::load_matrix_sync(fb, sb, 16);
  wmma::load_matrix_sync(fbt, sbt, 16);
  wmma::load_matrix_sync(fc, sc, 16, wmma::mem_row_major);
  wmma::mma_sync(fd, fa, fb, fc);
  wmma::store_matrix_sync(d[0], fd, 16, wmma::mem_row_major);
  wmma::mma_sync(fd, fa, fbt, fc);
  wmma::store_matrix_sync(d[1], fd, 16, wmma::mem_col_major);
  wmma::load_matrix_sync(row_of, rows, 16, wmma::mem_row_major);
  for (int e = 0; e < fc.num_elements; ++e) fc.x[e] *= row_of.x[e];
  wmma::store_matrix_sync(d[2], fc, 16, wmma::mem_row_major);
  __syncwarp();
  for (int e = static_cast<int>(threadIdx.x); e < 3 * 256; e += 32) out[e] = d[e / 256][e % 256];
}

TEST(CudaOnCpu, WarpTensorCoreProductsMultiplyInEveryLayout) {
  std::vector<__nv_bfloat16> a(256), b(256);
  std::vector<float> c(256), out(3 * 256);
  for (int e = 0; e < 256; ++e) {
    a[static_cast<size_t>(e)] = __float2bfloat16_rn(static_cast<float>((e * 7) % 23 - 11) / 8.0f);
    b[static_cast<size_t>(e)] = __float2bfloat16_rn(static_cast<float>((e * 5) % 19 - 9) / 4.0f);
    c[static_cast<size_t>(e)] = static_cast<float>(e % 13) - 6.0f;
  }
  const int64_t products = tandem::cuda_on_cpu::TensorCoreProductsSoFar();
  TANDEM_LAUNCH(WarpProducts, 1, 32, 0, kStream)(a.data(), b.data(), c.data(), out.data());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(tandem::cuda_on_cpu::TensorCoreProductsSoFar() - products, 2) << "one per warp's mma_sync";
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 16; ++j) {
      // Small multiples of 1/32: every product and sum is exact in f32.
      double sum = c[static_cast<size_t>(16 * i + j)];
      for (int k = 0; k < 16; ++k) {
        sum += static_cast<double>(__bfloat162float(a[static_cast<size_t>(16 * i + k)])) *
               __bfloat162float(b[static_cast<size_t>(16 * k + j)]);
      }
      EXPECT_EQ(out[static_cast<size_t>(16 * i + j)], sum) << "row-major b, element " << i << "," << j;
      EXPECT_EQ(out[static_cast<size_t>(256 + 16 * j + i)], sum) << "column-major b, stored column-major, " << i
                                                                  << "," << j;
      EXPECT_EQ(out[static_cast<size_t>(512 + 16 * i + j)], i * c[static_cast<size_t>(16 * i + j)])
          << "scaled by the row numbers' fragment, " << i << "," << j;
    }
  }
}

// m16n8k16 products in the PTX ISA's register layouts, fed by ldmatrix:
// a b^T (b's rows staged: ldmatrix as it is), a b (b staged as it is:
// ldmatrix transposed), and (a b) b with a b's accumulators, rounded to
// bf16, taken in registers as the next product's A operand. Each lane
// writes its accumulators where the C layout puts them; out holds the
// three [16 x 16] results.
__global__ void WarpMmaProducts(const __nv_bfloat16* a, const __nv_bfloat16* b, float* out) {
  namespace mma = tandem::cuda::kernels::warp_mma;
  __shared__ __align__(16) __nv_bfloat16 sa[256];
  __shared__ __align__(16) __nv_bfloat16 sb[256];
  for (int e = static_cast<int>(threadIdx.x); e < 256; e += 32) {
    sa[e] = a[e];
    sb[e] = b[e];
  }
  __syncwarp();
  mma::Rows rows;
  mma::LoadRows(rows, sa, 16, 0, 0);
  uint32_t transposed[4], columns[4];
  mma::LoadTransposedColumns(transposed, sb, 16, 0, 0);
  mma::LoadColumns(columns, sb, 16, 0, 0);
  mma::Sums abt[2] = {}, ab[2] = {}, abb[2] = {};
  mma::Mma(abt[0], rows, transposed[0], transposed[1]);
  mma::Mma(abt[1], rows, transposed[2], transposed[3]);
  mma::Mma(ab[0], rows, columns[0], columns[1]);
  mma::Mma(ab[1], rows, columns[2], columns[3]);
  mma::Rows ab_rows[1];
  mma::RowsFromSums<16>(ab_rows, ab);
  mma::Mma(abb[0], ab_rows[0], columns[0], columns[1]);
  mma::Mma(abb[1], ab_rows[0], columns[2], columns[3]);
  const int g = mma::Lane() / 4, t = mma::Lane() % 4;
  for (int j = 0; j < 2; ++j) {
    for (int i = 0; i < 4; ++i) {
      const int at = (g + 8 * (i / 2)) * 16 + 8 * j + 2 * t + i % 2;
      out[at] = abt[j][i];
      out[256 + at] = ab[j][i];
      out[512 + at] = abb[j][i];
    }
  }
}

TEST(CudaOnCpu, PtxLevelWarpProductsMultiplyInThePtxRegisterLayouts) {
  std::vector<__nv_bfloat16> a(256), b(256);
  for (int e = 0; e < 256; ++e) {
    a[static_cast<size_t>(e)] = __float2bfloat16_rn(static_cast<float>((e * 7) % 23 - 11) / 8.0f);
    b[static_cast<size_t>(e)] = __float2bfloat16_rn(static_cast<float>((e * 5) % 19 - 9) / 4.0f);
  }
  const auto at = [](const std::vector<__nv_bfloat16>& m, int i, int j) {
    return static_cast<double>(__bfloat162float(m[static_cast<size_t>(16 * i + j)]));
  };
  std::vector<float> out(3 * 256, -1.0f);
  const int64_t products = tandem::cuda_on_cpu::TensorCoreProductsSoFar();
  TANDEM_LAUNCH(WarpMmaProducts, 1, 32, 0, kStream)(a.data(), b.data(), out.data());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(tandem::cuda_on_cpu::TensorCoreProductsSoFar() - products, 6) << "one per warp's mma";
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 16; ++j) {
      // Small multiples of 1/32: every product and sum is exact in f32
      // (and a b is exact in bf16: |a b| < 2^8 in steps of 1/32).
      double abt = 0.0, ab = 0.0, abb = 0.0;
      for (int k = 0; k < 16; ++k) {
        abt += at(a, i, k) * at(b, j, k);
        ab += at(a, i, k) * at(b, k, j);
      }
      for (int k = 0; k < 16; ++k) {
        double ab_ik = 0.0;
        for (int l = 0; l < 16; ++l) ab_ik += at(a, i, l) * at(b, l, k);
        abb += static_cast<double>(__bfloat162float(__float2bfloat16_rn(static_cast<float>(ab_ik)))) * at(b, k, j);
      }
      EXPECT_EQ(out[static_cast<size_t>(16 * i + j)], abt) << "a b^T, element " << i << "," << j;
      EXPECT_EQ(out[static_cast<size_t>(256 + 16 * i + j)], ab) << "a b, element " << i << "," << j;
      EXPECT_FLOAT_EQ(out[static_cast<size_t>(512 + 16 * i + j)], static_cast<float>(abb))
          << "(a b) b through the registers, element " << i << "," << j;
    }
  }
}

// An ldmatrix row address the GPU cannot take (not 16-byte aligned).
__global__ void MisalignedMatrixRows(const __nv_bfloat16* from) {
  __shared__ __align__(16) __nv_bfloat16 tile[256 + 8];
  for (int e = static_cast<int>(threadIdx.x); e < 264; e += 32) tile[e] = from[e % 256];
  __syncwarp();
  tandem::cuda::kernels::warp_mma::Rows rows;
  tandem::cuda::kernels::warp_mma::LoadRows(rows, tile + 4, 16, 0, 0);
}

TEST(CudaOnCpuDeathTest, AnLdmatrixRowTheGpuCannotTakeAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<__nv_bfloat16> from(256, __float2bfloat16_rn(1.0f));
  EXPECT_DEATH(TANDEM_LAUNCH(MisalignedMatrixRows, 1, 32, 0, kStream)(from.data()),
               "kernel MisalignedMatrixRows.*an ldmatrix row address not 16-byte aligned");
}

// A wmma load from a pointer the GPU cannot take (not 32-byte aligned).
__global__ void MisalignedWarpLoad(const float* from) {
  __shared__ __align__(32) float tile[256 + 4];
  for (int e = static_cast<int>(threadIdx.x); e < 260; e += 32) tile[e] = from[e % 256];
  __syncwarp();
  nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> f;
  nvcuda::wmma::load_matrix_sync(f, tile + 4, 16, nvcuda::wmma::mem_row_major);
}

TEST(CudaOnCpuDeathTest, AWarpMatrixLoadTheGpuCannotTakeAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<float> from(256, 1.0f);
  EXPECT_DEATH(TANDEM_LAUNCH(MisalignedWarpLoad, 1, 32, 0, kStream)(from.data()),
               "kernel MisalignedWarpLoad.*a wmma matrix not 32-byte aligned");
}

// Thread 0 returns before a barrier the others wait at: on a GPU a hang or
// worse; here an abort that says so.
__global__ void DivergentBarrier(float* out) {
  if (threadIdx.x == 0) return;
  __syncthreads();
  out[threadIdx.x] = 1.0f;
}

TEST(CudaOnCpuDeathTest, ADivergentSyncThreadsAbortsNamingTheKernelInsteadOfHanging) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<float> out(64);
  EXPECT_DEATH(TANDEM_LAUNCH(DivergentBarrier, 1, 64, 0, kStream)(out.data()),
               "kernel DivergentBarrier, block \\(0,0,0\\).*returned from the kernel \\(divergent __syncthreads\\)");
}

#if defined(__SANITIZE_THREAD__)
constexpr bool kThreadSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool kThreadSanitizer = true;
#else
constexpr bool kThreadSanitizer = false;
#endif
#else
constexpr bool kThreadSanitizer = false;
#endif

// What CI's thread part shows: a kernel whose __syncthreads was removed is
// a data race ThreadSanitizer reports, though on this machine it may well
// compute the right values.
TEST(CudaOnCpuDeathTest, ThreadSanitizerReportsAKernelMissingASyncThreads) {
  if (!kThreadSanitizer) GTEST_SKIP() << "needs a ThreadSanitizer build (tools/ci/thread_suite.sh)";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::vector<float> x = Values(256);
  std::vector<float> out(256);
  // ThreadSanitizer turns the exit status into 66 when it reported anything.
  EXPECT_EXIT(
      {
        TANDEM_LAUNCH(RotateByOne<false>, 1, 256, 0, kStream)(x.data(), out.data());
        std::exit(0);
      },
      ::testing::ExitedWithCode(66), "WARNING: ThreadSanitizer: data race");
  // With the barrier, the same kernel is clean in this process.
  TANDEM_LAUNCH(RotateByOne<true>, 1, 256, 0, kStream)(x.data(), out.data());
  for (int i = 0; i < 256; ++i) EXPECT_EQ(out[static_cast<size_t>(i)], x[static_cast<size_t>((i + 1) % 256)]);
}

}  // namespace
