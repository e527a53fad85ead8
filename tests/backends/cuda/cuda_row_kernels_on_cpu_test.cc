// The CUDA backend's reductions, row kernels (softmax and its kin,
// normalizations, cross-entropy) and position kernels (causal mask,
// rotary, attention and its gradient, tiled and row by row), run on the CPU
// on CUDA's execution model and compared with the CPU reference kernels, as
// cuda_kernels_on_cpu_test.cc does for the elementwise and lookup kernels.
#include <cmath>
#include <cstdint>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "tests/backends/cuda/kernels_on_cpu_util.h"

namespace tandem::cuda::kernels {
namespace {


// The plan of reducing `axes` of a row-major `shape`.
ReductionPlan PlanOf(const ir::Shape& shape, const std::vector<int64_t>& axes) {
  ReductionPlan plan;
  std::vector<int64_t> strides(shape.size());
  int64_t stride = 1;
  for (size_t axis = shape.size(); axis-- > 0;) {
    strides[axis] = stride;
    stride *= shape[axis];
  }
  plan.num_outputs = 1;
  plan.kept.num_operands = 1;
  for (size_t axis = 0; axis < shape.size(); ++axis) {
    if (std::find(axes.begin(), axes.end(), static_cast<int64_t>(axis)) != axes.end()) {
      plan.reduced_extents[plan.reduced_rank] = shape[axis];
      plan.reduced_strides[plan.reduced_rank] = strides[axis];
      ++plan.reduced_rank;
      plan.reduced_count *= static_cast<float>(shape[axis]);
    } else {
      plan.kept.extents[plan.kept.rank] = shape[axis];
      plan.kept.strides[0][plan.kept.rank] = strides[axis];
      ++plan.kept.rank;
      plan.num_outputs *= shape[axis];
    }
  }
  return plan;
}

TEST(CudaKernelsOnCpu, FewOutputsOfManyElementsAreReducedInChunksFixedByTheShape) {
  // Chunks enough for 1024 blocks, each folding at least 8192 elements,
  // whatever the GPU: 300000 -> 37 chunks of 8192 (the last partial); 3
  // rows of 140000 -> 3 x 18; a bias gradient's 1024 columns of 4096 (32
  // columns a block) -> 1024 x 16 chunks of 256 rows; a single block's worth
  // or outputs enough -> one pass, no scratch.
  EXPECT_EQ(ReduceScratchBytes(PlanOf({300000}, {0})), 37 * sizeof(float));
  EXPECT_EQ(ReduceScratchBytes(PlanOf({3, 140000}, {1})), 3 * 18 * sizeof(float));
  EXPECT_EQ(ReduceScratchBytes(PlanOf({4096, 1024}, {0})), 1024 * 16 * sizeof(float));
  // 64 columns of 140000 rows: 512 chunks would be wanted, but chunks of
  // the length that needs (274 rows) are 511; none is left empty.
  EXPECT_EQ(ReduceScratchBytes(PlanOf({140000, 64}, {0})), 64 * 511 * sizeof(float));
  EXPECT_EQ(ReduceScratchBytes(PlanOf({8192}, {0})), 0u);
  EXPECT_EQ(ReduceScratchBytes(PlanOf({2000, 70000}, {1})), 0u);
}

// A reduction's input shape and the axes it reduces.
struct ReductionCase {
  ir::Shape shape;
  std::vector<int64_t> axes;
};

TEST(CudaKernelsOnCpu, ReductionsMatchTheReferenceInEveryLayout) {
  // Rows longer than a block (one output a block), columns (32 neighbouring
  // outputs a block, the last block partial, 3 chunks of 200 rows), two
  // separated axes, all axes; and reductions into few outputs in two passes
  // (the whole of 20000 elements and rows of 20000 in 3 chunks, columns of
  // 3000 in 12; the last chunk of each partial).
  for (const ReductionCase& c : std::vector<ReductionCase>{{{2, 3, 300}, {2}},
                                         {{600, 70}, {0}},
                                         {{5, 33, 7}, {0, 2}},
                                         {{37}, {0}},
                                         {{20000}, {0}},
                                         {{2, 20000}, {1}},
                                         {{3000, 2}, {0}}}) {
    HostTensor x = Random(c.shape, -1, 1, 11);
    std::vector<double> scale;  // a sum's error bound scales with the sum of |x|
    {
      HostTensor magnitude = x;
      for (int64_t i = 0; i < magnitude.num_elements(); ++i) magnitude.f32()[i] = std::fabs(magnitude.f32()[i]);
      const HostTensor sums = Reference(OpKind::kReduceSum, {magnitude}, {{"axes", c.axes}, {"keep_dims", int64_t{0}}});
      for (int64_t i = 0; i < sums.num_elements(); ++i) scale.push_back(sums.f32()[i]);
    }
    const ReductionPlan plan = PlanOf(c.shape, c.axes);
    const std::string what = absl::StrCat("shape rank ", c.shape.size(), " over ", c.axes.size(), " axes");
    for (const auto& [op, kind] : std::vector<std::pair<ReduceOp, OpKind>>{
             {ReduceOp::kSum, OpKind::kReduceSum}, {ReduceOp::kMean, OpKind::kReduceMean},
             {ReduceOp::kMax, OpKind::kReduceMax}}) {
      const HostTensor expected = Reference(kind, {x}, {{"axes", c.axes}, {"keep_dims", int64_t{0}}});
      std::vector<float> scratch(ReduceScratchBytes(plan) / sizeof(float));
      const HostTensor actual = RunTwice(expected.type(), [&, op = op](HostTensor& out) {
        return LaunchReduce(op, {x.f32()}, {out.f32()}, plan, scratch.data(), kStream);
      });
      if (op == ReduceOp::kMax) {
        ExpectSameBits(actual, expected, absl::StrCat("reduce_max ", what));
      } else {
        // Two sums of the same n terms in different orders differ by at
        // most 2 (n - 1) u sum(|x|), u = 2^-24 (each within (n - 1) u of
        // the exact sum).
        std::vector<double> bound = scale;
        if (op == ReduceOp::kMean) {
          for (double& value : bound) value /= plan.reduced_count;
        }
        const double relative = 2 * (plan.reduced_count - 1) * std::ldexp(1.0, -24);
        ExpectClose(actual, expected, relative, 0, absl::StrCat(ir::OpName(kind), " ", what), bound);
      }
    }
  }
}

// bf16 reductions in one launch (widened as loaded, partials in f32, the
// result rounded once) give the bits of widening, the f32 reduction and
// narrowing: in one pass and in two.
TEST(CudaKernelsOnCpu, ReductionsOnBf16GiveTheBitsOfWideningAndNarrowing) {
  for (const ReductionCase& c : std::vector<ReductionCase>{{{2, 3, 300}, {2}}, {{600, 70}, {0}}, {{20000}, {0}}}) {
    HostTensor x16({DType::kBF16, c.shape});
    const HostTensor x = Random(c.shape, -1, 1, 21);
    ASSERT_EQ(LaunchConvert(ConvertOp::kF32ToBf16, x.data(), x16.data(), x.num_elements(), kStream), cudaSuccess);
    HostTensor wide({DType::kF32, c.shape});
    ASSERT_EQ(LaunchConvert(ConvertOp::kBf16ToF32, x16.data(), wide.data(), x.num_elements(), kStream), cudaSuccess);
    const ReductionPlan plan = PlanOf(c.shape, c.axes);
    std::vector<float> scratch(ReduceScratchBytes(plan) / sizeof(float));
    const ir::Shape out_shape = {plan.num_outputs};
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMax}) {
      const HostTensor one = RunTwice({DType::kBF16, out_shape}, [&](HostTensor& out) {
        return LaunchReduce(op, {x16.data(), true}, {out.data(), true}, plan, scratch.data(), kStream);
      });
      const HostTensor f32 = RunTwice({DType::kF32, out_shape}, [&](HostTensor& out) {
        return LaunchReduce(op, {wide.f32()}, {out.f32()}, plan, scratch.data(), kStream);
      });
      HostTensor narrowed({DType::kBF16, out_shape});
      ASSERT_EQ(LaunchConvert(ConvertOp::kF32ToBf16, f32.data(), narrowed.data(), f32.num_elements(), kStream),
                cudaSuccess);
      ExpectSameBits(one, narrowed, absl::StrCat("reduction ", static_cast<int>(op), " of ", x.num_elements()));
    }
  }
}

TEST(CudaKernelsOnCpu, RowOpsMatchTheReferenceAtEveryRowWidth) {
  // 1 and 33 take one warp a row, 300 four warps, 3000 a full block.
  for (int64_t length : {int64_t{1}, int64_t{33}, int64_t{300}, int64_t{3000}}) {
    const HostTensor x = Random({3, 1, length}, -5, 5, 12);  // rank 3, rows flattened
    const HostTensor dy = Random({3, 1, length}, -1, 1, 13);
    const int64_t rows = 3;
    const std::string what = absl::StrCat(" length ", length);
    for (const auto& [op, kind, grad, grad_kind] :
         std::vector<std::tuple<RowOp, OpKind, RowOp, OpKind>>{
             {RowOp::kSoftmax, OpKind::kSoftmax, RowOp::kSoftmaxGrad, OpKind::kSoftmaxGrad},
             {RowOp::kLogSoftmax, OpKind::kLogSoftmax, RowOp::kLogSoftmaxGrad, OpKind::kLogSoftmaxGrad}}) {
      const HostTensor y = Reference(kind, {x});
      const HostTensor actual = RunTwice(x.type(), [&, op = op](HostTensor& out) {
        return LaunchRows(op, {x.f32()}, {}, {out.f32()}, rows, length, kStream);
      });
      ExpectClose(actual, y, 2e-6, 2e-7, absl::StrCat(ir::OpName(kind), what));
      const HostTensor expected_grad = Reference(grad_kind, {y, dy});
      const HostTensor actual_grad = RunTwice(x.type(), [&, grad = grad](HostTensor& out) {
        return LaunchRows(grad, {y.f32()}, {dy.f32()}, {out.f32()}, rows, length, kStream);
      });
      ExpectClose(actual_grad, expected_grad, 1e-5, 1e-6, absl::StrCat(ir::OpName(grad_kind), what));
    }
  }
}

TEST(CudaKernelsOnCpu, NormalizationsMatchTheReference) {
  for (int64_t length : {int64_t{7}, int64_t{300}, int64_t{2500}}) {
    const HostTensor x = Random({2, length}, -3, 3, 14);
    const HostTensor gamma = Random({length}, 0.5f, 1.5f, 15), beta = Random({length}, -0.5f, 0.5f, 16);
    const HostTensor dy = Random({2, length}, -1, 1, 17);
    const ir::Attributes eps = {{"eps", 1e-5}};
    const std::string what = absl::StrCat(" length ", length);
    ExpectClose(RunTwice(x.type(),
                         [&](HostTensor& out) {
                           return LaunchNormalization(NormOp::kNormalize, {x.f32()}, {}, {}, {out.f32()}, 2,
                                                      length, 1e-5f, kStream);
                         }),
                Reference(OpKind::kNormalize, {x}, eps), 1e-5, 1e-6, "normalize" + what);
    ExpectClose(RunTwice(x.type(),
                         [&](HostTensor& out) {
                           return LaunchNormalization(NormOp::kLayerNorm, {x.f32()}, {gamma.f32()}, {beta.f32()}, {out.f32()},
                                                      2, length, 1e-5f, kStream);
                         }),
                Reference(OpKind::kLayerNorm, {x, gamma, beta}, eps), 1e-5, 1e-6, "layer_norm" + what);
    ExpectClose(RunTwice(x.type(),
                         [&](HostTensor& out) {
                           return LaunchNormalization(NormOp::kNormalizeGrad, {x.f32()}, {dy.f32()}, {}, {out.f32()}, 2,
                                                      length, 1e-5f, kStream);
                         }),
                Reference(OpKind::kNormalizeGrad, {x, dy}, eps), 1e-4, 1e-5, "normalize_grad" + what);
  }
}

TEST(CudaKernelsOnCpu, CausalMaskAndRotaryMatchTheReference) {
  const HostTensor scores = Random({2, 3, 7, 7}, -1, 1, 18);
  const HostTensor masked = RunTwice(scores.type(), [&](HostTensor& out) {
    return LaunchCausalMask(In(scores), Out(out), 6, 7, 7, -INFINITY, kStream);
  });
  ExpectSameBits(masked, Reference(OpKind::kCausalMask, {scores}, {{"fill", -INFINITY}}), "causal_mask");
  const HostTensor q = Random({2, 40, 8}, -1, 1, 19);
  for (bool inverse : {false, true}) {
    const HostTensor rotated = RunTwice(q.type(), [&](HostTensor& out) {
      return LaunchRotary({q.f32()}, nullptr, {out.f32()}, 2, 40, 8, 10000.0, inverse, kStream);
    });
    ExpectClose(rotated,
                Reference(OpKind::kRotary, {q}, {{"theta", 10000.0}, {"inverse", int64_t{inverse ? 1 : 0}}}), 1e-6,
                1e-6, inverse ? "rotary inverse" : "rotary");
  }
  // Each row at a position of its own (decoding), far past the rows there are.
  std::vector<int32_t> at(80);
  for (size_t row = 0; row < at.size(); ++row) at[row] = static_cast<int32_t>((row * 37) % 500);
  const HostTensor positions = HostTensor::FromInts({2, 40}, at);
  const HostTensor rotated = RunTwice(q.type(), [&](HostTensor& out) {
    return LaunchRotary({q.f32()}, positions.i32(), {out.f32()}, 2, 40, 8, 10000.0, false, kStream);
  });
  ExpectClose(rotated, Reference(OpKind::kRotary, {q, positions}, {{"theta", 10000.0}, {"inverse", int64_t{0}}}),
              1e-6, 1e-6, "rotary at positions");
}

// bf16 rows in one kernel (widened as loaded, folded in f32, rounded once
// as stored) give the bits of widening, the f32 kernel and narrowing: the
// softmax family and its gradients, the three normalizations, rotary.
TEST(CudaKernelsOnCpu, RowKernelsOnBf16GiveTheBitsOfWideningAndNarrowing) {
  using Operands = std::vector<HostTensor>;
  for (int64_t length : {int64_t{33}, int64_t{300}}) {  // one warp a row, several
    const ir::Shape shape = {3, length};
    const HostTensor x = ToBf16(Random(shape, -5, 5, 31)), dy = ToBf16(Random(shape, -1, 1, 32));
    const HostTensor gamma = ToBf16(Random({length}, 0.5f, 1.5f, 33)), beta = ToBf16(Random({length}, -0.5f, 0.5f, 34));
    const std::string at = absl::StrCat(" length ", length);
    for (RowOp op : {RowOp::kSoftmax, RowOp::kLogSoftmax}) {
      ExpectBf16GivesTheBitsOfF32({x}, shape, [&](const Operands& in, HostTensor& out) {
        return LaunchRows(op, In(in[0]), {}, Out(out), 3, length, kStream);
      }, absl::StrCat("row op ", static_cast<int>(op), at));
    }
    for (RowOp op : {RowOp::kSoftmaxGrad, RowOp::kLogSoftmaxGrad}) {
      ExpectBf16GivesTheBitsOfF32({x, dy}, shape, [&](const Operands& in, HostTensor& out) {
        return LaunchRows(op, In(in[0]), In(in[1]), Out(out), 3, length, kStream);
      }, absl::StrCat("row op ", static_cast<int>(op), at));
    }
    ExpectBf16GivesTheBitsOfF32({x}, shape, [&](const Operands& in, HostTensor& out) {
      return LaunchNormalization(NormOp::kNormalize, In(in[0]), {}, {}, Out(out), 3, length, 1e-5f, kStream);
    }, "normalize" + at);
    ExpectBf16GivesTheBitsOfF32({x, gamma, beta}, shape, [&](const Operands& in, HostTensor& out) {
      return LaunchNormalization(NormOp::kLayerNorm, In(in[0]), In(in[1]), In(in[2]), Out(out), 3, length, 1e-5f,
                                 kStream);
    }, "layer_norm" + at);
    ExpectBf16GivesTheBitsOfF32({x, dy}, shape, [&](const Operands& in, HostTensor& out) {
      return LaunchNormalization(NormOp::kNormalizeGrad, In(in[0]), In(in[1]), {}, Out(out), 3, length, 1e-5f,
                                 kStream);
    }, "normalize_grad" + at);
  }
  const HostTensor q = ToBf16(Random({2, 40, 8}, -1, 1, 35));
  for (bool inverse : {false, true}) {
    ExpectBf16GivesTheBitsOfF32({q}, q.shape(), [&](const Operands& in, HostTensor& out) {
      return LaunchRotary(In(in[0]), nullptr, Out(out), 2, 40, 8, 10000.0, inverse, kStream);
    }, inverse ? "rotary inverse" : "rotary");
  }
  const HostTensor scores = ToBf16(Random({2, 3, 7, 7}, -1, 1, 36));
  ExpectBf16GivesTheBitsOfF32({scores}, scores.shape(), [&](const Operands& in, HostTensor& out) {
    return LaunchCausalMask(In(in[0]), Out(out), 6, 7, 7, -INFINITY, kStream);
  }, "causal_mask");
}

// Random bf16 attention operands in [-1, 1], from seeds seed .. seed + 5:
// q and dy [1, heads, seq, width], k and v [1, 1, seq, width]; and a cache of
// 30 more keys and values, which the queries read at positions of their own.
struct Bf16Attention {
  Bf16Attention(int64_t heads, int64_t seq, int64_t width, uint32_t seed)
      : q(ToBf16(Random({1, heads, seq, width}, -1, 1, seed))),
        k(ToBf16(Random({1, 1, seq, width}, -1, 1, seed + 1))),
        v(ToBf16(Random({1, 1, seq, width}, -1, 1, seed + 2))),
        dy(ToBf16(Random({1, heads, seq, width}, -1, 1, seed + 3))),
        cached_keys(seq + 30),
        cache_k(ToBf16(Random({1, 1, cached_keys, width}, -1, 1, seed + 4))),
        cache_v(ToBf16(Random({1, 1, cached_keys, width}, -1, 1, seed + 5))) {
    std::vector<int32_t> at(static_cast<size_t>(seq));
    for (size_t i = 0; i < at.size(); ++i) at[i] = static_cast<int32_t>((i * 37) % cached_keys);
    positions = HostTensor::FromInts({1, seq}, at);
  }
  HostTensor q, k, v, dy;
  int64_t cached_keys;
  HostTensor cache_k, cache_v, positions;
};

// Attention on bf16 q, k, v (and dy) off the tensor cores (widths other
// than 32, 64 and 128, or unaligned operands) is a thread a row: every
// score, weight and sum in f32, each result rounded once as it is stored,
// it gives the bits of the f32 launch on the widened operands, narrowed (at
// width 8 over shared tiles; at 136 over its columns in chunks of 128, the
// second chunk partial): forward, gradient, and queries at positions against
// a longer cache. Small shapes: a CPU thread per lane is slow here.
TEST(CudaKernelsOnCpu, AttentionOnBf16GivesTheBitsOfWideningAndNarrowing) {
  using Operands = std::vector<HostTensor>;
  for (int64_t width : {int64_t{8}, int64_t{136}}) {
    const int64_t seq = width == 8 ? 40 : 20, heads = width == 8 ? 2 : 1;
    const std::string what = absl::StrCat(" width ", width);
    const Bf16Attention operands(heads, seq, width, 60);
    const HostTensor &q = operands.q, &k = operands.k, &v = operands.v, &dy = operands.dy;
    const float scale = 1.0f / std::sqrt(static_cast<float>(width));
    ExpectBf16GivesTheBitsOfF32({q, k, v}, q.shape(), [&](const Operands& in, HostTensor& out) {
      return LaunchAttention(In(in[0]), In(in[1]), In(in[2]), nullptr, Out(out), 1, heads, 1, seq, seq, width, scale,
                             kStream);
    }, "attention" + what);
    const int64_t n_q = q.num_elements(), n_kv = k.num_elements();
    std::vector<float> scratch(AttentionGradScratchBytes(heads * seq) / sizeof(float));
    ExpectBf16GivesTheBitsOfF32({q, k, v, dy}, {n_q + 2 * n_kv}, [&](const Operands& in, HostTensor& out) {
      return LaunchAttentionGrad(In(in[0]), In(in[1]), In(in[2]), In(in[3]), Out(out), Out(out, n_q),
                                 Out(out, n_q + n_kv), 1, heads, 1, seq, width, scale, scratch.data(), kStream);
    }, "attention_grad" + what);
    const int64_t cached_keys = operands.cached_keys;
    const HostTensor &cache_k = operands.cache_k, &cache_v = operands.cache_v, &positions = operands.positions;
    ExpectBf16GivesTheBitsOfF32({q, cache_k, cache_v}, q.shape(), [&](const Operands& in, HostTensor& out) {
      return LaunchAttention(In(in[0]), In(in[1]), In(in[2]), positions.i32(), Out(out), 1, heads, 1, seq,
                             cached_keys, width, scale, kStream);
    }, "attention at positions" + what);
  }
  // Operands of two dtypes are refused.
  const HostTensor q16 = ToBf16(Random({1, 1, 4, 8}, -1, 1, 66)), k32 = Random({1, 1, 4, 8}, -1, 1, 67);
  HostTensor out({DType::kBF16, {1, 1, 4, 8}});
  EXPECT_EQ(LaunchAttention(In(q16), In(k32), In(q16), nullptr, Out(out), 1, 1, 1, 4, 4, 8, 0.5f, kStream),
            cudaErrorInvalidValue);
}

// bf16 attention at the common head widths runs on tensor cores
// (attention_mma.cu): q K^T and the weighted sums as bf16 products with f32
// accumulation, the weights rounded to bf16. Against the f32 reference on
// the same (widened) operands it is within bf16's rounding; it repeats bit
// for bit; and it did run on the (emulated) tensor cores. Width 32: two
// query heads on one key/value head and 70 rows (two forward blocks of 64
// rows, three gradient tiles of 32, the last partly idle); 64 and 128: one
// head and 40 rows.
TEST(CudaKernelsOnCpu, AttentionOnBf16AtTheCommonWidthsRunsOnTensorCoresWithinBf16OfTheReference) {
  for (int64_t width : {int64_t{32}, int64_t{64}, int64_t{128}}) {
    const int64_t seq = width == 32 ? 70 : 40, heads = width == 32 ? 2 : 1;
    const std::string what = absl::StrCat(" width ", width);
    const Bf16Attention operands(heads, seq, width, 70);
    const HostTensor &q = operands.q, &k = operands.k, &v = operands.v, &dy = operands.dy;
    const float scale = 1.0f / std::sqrt(static_cast<float>(width));
    const ir::Attributes attributes = {{"scale", double{scale}}};
    const int64_t products = cuda_on_cpu::TensorCoreProductsSoFar();
    const HostTensor out = RunTwice(q.type(), [&](HostTensor& result) {
      return LaunchAttention(In(q), In(k), In(v), nullptr, Out(result), 1, heads, 1, seq, seq, width, scale,
                             kStream);
    });
    EXPECT_GT(cuda_on_cpu::TensorCoreProductsSoFar(), products) << "on tensor cores" << what;
    ExpectClose(ToF32(out), Reference(OpKind::kAttention, {ToF32(q), ToF32(k), ToF32(v)}, attributes), 1e-2, 4e-3,
                "bf16 attention" + what);
    const int64_t n_q = q.num_elements(), n_kv = k.num_elements();
    std::vector<float> scratch(AttentionGradScratchBytes(heads * seq) / sizeof(float));
    const HostTensor grads = RunTwice({DType::kBF16, {n_q + 2 * n_kv}}, [&](HostTensor& result) {
      return LaunchAttentionGrad(In(q), In(k), In(v), In(dy), Out(result), Out(result, n_q), Out(result, n_q + n_kv),
                                 1, heads, 1, seq, width, scale, scratch.data(), kStream);
    });
    ExpectClose(ToF32(grads),
                Reference(OpKind::kAttentionGrad, {ToF32(q), ToF32(k), ToF32(v), ToF32(dy)}, attributes), 2e-2,
                1e-2, "bf16 attention_grad" + what);

    const int64_t cached_keys = operands.cached_keys;
    const HostTensor &cache_k = operands.cache_k, &cache_v = operands.cache_v, &positions = operands.positions;
    const HostTensor cached = RunTwice(q.type(), [&](HostTensor& result) {
      return LaunchAttention(In(q), In(cache_k), In(cache_v), positions.i32(), Out(result), 1, heads, 1, seq,
                             cached_keys, width, scale, kStream);
    });
    ExpectClose(ToF32(cached),
                Reference(OpKind::kAttention, {ToF32(q), ToF32(cache_k), ToF32(cache_v), positions}, attributes), 1e-2,
                4e-3, "bf16 attention at positions" + what);
  }
  // An f32 result of bf16 operands (precision +bf16) is the tensor cores'
  // alone: refused at a width they do not take; a bf16 result of f32
  // operands, never.
  const HostTensor q16 = ToBf16(Random({1, 1, 4, 8}, -1, 1, 76)), q32 = Random({1, 1, 4, 8}, -1, 1, 77);
  HostTensor out32({DType::kF32, {1, 1, 4, 8}}), out16({DType::kBF16, {1, 1, 4, 8}});
  EXPECT_EQ(LaunchAttention(In(q16), In(q16), In(q16), nullptr, Out(out32), 1, 1, 1, 4, 4, 8, 0.5f, kStream),
            cudaErrorInvalidValue);
  EXPECT_EQ(LaunchAttention(In(q32), In(q32), In(q32), nullptr, Out(out16), 1, 1, 1, 4, 4, 8, 0.5f, kStream),
            cudaErrorInvalidValue);
  std::vector<float> scratch(AttentionGradScratchBytes(4) / sizeof(float));
  EXPECT_EQ(LaunchAttentionGrad(In(q16), In(q16), In(q16), In(q16), Out(out32), Out(out32), Out(out32), 1, 1, 1, 4, 8,
                                0.5f, scratch.data(), kStream),
            cudaErrorInvalidValue);
}

TEST(CudaKernelsOnCpu, AttentionAtPositionsAgainstACacheMatchesTheReference) {
  // Three queries per sequence against a cache of 9 keys, each query at a
  // position of its own.
  const HostTensor q = Random({2, 4, 3, 6}, -1, 1, 34), k = Random({2, 2, 9, 6}, -1, 1, 35),
                   v = Random({2, 2, 9, 6}, -1, 1, 36);
  const HostTensor positions = HostTensor::FromInts({2, 3}, {0, 4, 8, 2, 2, 7});
  const HostTensor out = RunTwice(q.type(), [&](HostTensor& result) {
    return LaunchAttention(In(q), In(k), In(v), positions.i32(), Out(result), 2, 4, 2, 3, 9, 6, 0.4f,
                           kStream);
  });
  ExpectClose(out, Reference(OpKind::kAttention, {q, k, v, positions}, {{"scale", 0.4}}), 1e-5, 1e-6,
              "attention at positions");
}

TEST(CudaKernelsOnCpu, AttentionAndItsGradientMatchTheReferenceWithGroupedHeads) {
  const HostTensor q = Random({2, 4, 11, 6}, -1, 1, 30), k = Random({2, 2, 11, 6}, -1, 1, 31),
                   v = Random({2, 2, 11, 6}, -1, 1, 32), dy = Random({2, 4, 11, 6}, -1, 1, 33);
  const ir::Attributes scale = {{"scale", 0.4}};
  const HostTensor out = RunTwice(q.type(), [&](HostTensor& result) {
    return LaunchAttention(In(q), In(k), In(v), nullptr, Out(result), 2, 4, 2, 11, 11, 6, 0.4f, kStream);
  });
  ExpectClose(out, Reference(OpKind::kAttention, {q, k, v}, scale), 1e-5, 1e-6, "attention");
  const int64_t n_q = q.num_elements(), n_kv = k.num_elements();
  std::vector<float> scratch(AttentionGradScratchBytes(2 * 4 * 11) / sizeof(float));
  const HostTensor grads = RunTwice({DType::kF32, {n_q + 2 * n_kv}}, [&](HostTensor& result) {
    return LaunchAttentionGrad(In(q), In(k), In(v), In(dy), Out(result), Out(result, n_q), Out(result, n_q + n_kv), 2,
                               4, 2, 11, 6, 0.4f, scratch.data(), kStream);
  });
  ExpectClose(grads, Reference(OpKind::kAttentionGrad, {q, k, v, dy}, scale), 1e-4, 1e-5, "attention_grad");
}

TEST(CudaKernelsOnCpu, TiledAttentionOverSeveralQueryAndKeyTilesMatchesTheReference) {
  // 70 queries: two blocks of query rows, the second partly idle; three key
  // tiles, the last partial; at positions, rows of one block reading
  // different numbers of tiles.
  const HostTensor q = Random({1, 4, 70, 8}, -1, 1, 40), k = Random({1, 2, 70, 8}, -1, 1, 41),
                   v = Random({1, 2, 70, 8}, -1, 1, 42);
  const HostTensor out = RunTwice(q.type(), [&](HostTensor& result) {
    return LaunchAttention(In(q), In(k), In(v), nullptr, Out(result), 1, 4, 2, 70, 70, 8, 0.3f, kStream);
  });
  ExpectClose(out, Reference(OpKind::kAttention, {q, k, v}, {{"scale", 0.3}}), 1e-5, 1e-6, "tiled attention");
  // The gradient over as many tiles: two blocks of query rows, two of key
  // rows, three query tiles per head.
  const HostTensor dy = Random({1, 4, 70, 8}, -1, 1, 45);
  const int64_t n_q = q.num_elements(), n_kv = k.num_elements();
  std::vector<float> scratch(AttentionGradScratchBytes(4 * 70) / sizeof(float));
  const HostTensor grads = RunTwice({DType::kF32, {n_q + 2 * n_kv}}, [&](HostTensor& result) {
    return LaunchAttentionGrad(In(q), In(k), In(v), In(dy), Out(result), Out(result, n_q), Out(result, n_q + n_kv), 1,
                               4, 2, 70, 8, 0.3f, scratch.data(), kStream);
  });
  ExpectClose(grads, Reference(OpKind::kAttentionGrad, {q, k, v, dy}, {{"scale", 0.3}}), 1e-4, 1e-5,
              "tiled attention_grad");

  const HostTensor cache_k = Random({1, 2, 100, 8}, -1, 1, 43), cache_v = Random({1, 2, 100, 8}, -1, 1, 44);
  std::vector<int32_t> at(70);
  for (size_t i = 0; i < at.size(); ++i) at[i] = static_cast<int32_t>((i * 37) % 100);
  const HostTensor positions = HostTensor::FromInts({1, 70}, at);
  const HostTensor cached = RunTwice(q.type(), [&](HostTensor& result) {
    return LaunchAttention(In(q), In(cache_k), In(cache_v), positions.i32(), Out(result), 1, 4, 2, 70, 100, 8,
                           0.3f, kStream);
  });
  ExpectClose(cached, Reference(OpKind::kAttention, {q, cache_k, cache_v, positions}, {{"scale", 0.3}}), 1e-5, 1e-6,
              "tiled attention at positions");
}

// The kernels of the common head widths on their 16-byte-aligned operands:
// at 32 and 64 the tiled products (32 query rows and 32 keys a tile), at
// 128 a thread group per row (its elements split between lanes); the
// gradient, and queries at positions against a longer cache; each repeats
// bit for bit. At width 32, grouped heads and 70 rows (three query tiles,
// the last partly idle, and as many key tiles); at 64 and 128 one head and
// 40 rows (two tiles; one block at 128, partly idle), since a CPU thread
// per lane makes their shuffles slow here.
TEST(CudaKernelsOnCpu, AttentionAtTheCommonHeadWidthsMatchesTheReference) {
  for (int64_t width : {int64_t{32}, int64_t{64}, int64_t{128}}) {
    // Two query heads on one key/value head at width 32; one of each at the
    // split widths.
    const int64_t seq = width == 32 ? 70 : 40, heads = width == 32 ? 2 : 1;
    const std::string what = absl::StrCat(" width ", width);
    const HostTensor q = Random({1, heads, seq, width}, -1, 1, 50), k = Random({1, 1, seq, width}, -1, 1, 51),
                     v = Random({1, 1, seq, width}, -1, 1, 52), dy = Random({1, heads, seq, width}, -1, 1, 53);
    for (const HostTensor* t : {&q, &k, &v, &dy}) ASSERT_EQ(reinterpret_cast<uintptr_t>(t->f32()) % 16, 0u) << what;
    const float scale = 1.0f / std::sqrt(static_cast<float>(width));
    const ir::Attributes attributes = {{"scale", double{scale}}};
    const HostTensor out = RunTwice(q.type(), [&](HostTensor& result) {
      return LaunchAttention(In(q), In(k), In(v), nullptr, Out(result), 1, heads, 1, seq, seq, width, scale,
                             kStream);
    });
    ExpectClose(out, Reference(OpKind::kAttention, {q, k, v}, attributes), 1e-5, 1e-6, "attention" + what);
    const int64_t n_q = q.num_elements(), n_kv = k.num_elements();
    std::vector<float> scratch(AttentionGradScratchBytes(heads * seq) / sizeof(float));
    const HostTensor grads = RunTwice({DType::kF32, {n_q + 2 * n_kv}}, [&](HostTensor& result) {
      return LaunchAttentionGrad(In(q), In(k), In(v), In(dy), Out(result), Out(result, n_q),
                                 Out(result, n_q + n_kv), 1, heads, 1, seq, width, scale, scratch.data(), kStream);
    });
    ExpectClose(grads, Reference(OpKind::kAttentionGrad, {q, k, v, dy}, attributes), 1e-4, 1e-5,
                "attention_grad" + what);

    const int64_t cached_keys = seq + 30;  // more keys than queries, in one more tile
    const HostTensor cache_k = Random({1, 1, cached_keys, width}, -1, 1, 54),
                     cache_v = Random({1, 1, cached_keys, width}, -1, 1, 55);
    std::vector<int32_t> at(static_cast<size_t>(seq));
    for (size_t i = 0; i < at.size(); ++i) at[i] = static_cast<int32_t>((i * 37) % cached_keys);
    const HostTensor positions = HostTensor::FromInts({1, seq}, at);
    const HostTensor cached = RunTwice(q.type(), [&](HostTensor& result) {
      return LaunchAttention(In(q), In(cache_k), In(cache_v), positions.i32(), Out(result), 1, heads, 1, seq,
                             cached_keys, width, scale, kStream);
    });
    ExpectClose(cached, Reference(OpKind::kAttention, {q, cache_k, cache_v, positions}, attributes), 1e-5, 1e-6,
                "attention at positions" + what);
  }
}

TEST(CudaKernelsOnCpu, CrossEntropyAndItsGradientMatchTheReference) {
  for (int64_t classes : {int64_t{5}, int64_t{300}}) {
    const HostTensor logits = Random({7, classes}, -4, 4, 20);
    const HostTensor labels = Ids({7}, static_cast<int32_t>(classes), 21);
    const HostTensor dy = Random({7}, 0.1f, 1, 22);
    const std::string what = absl::StrCat(" classes ", classes);
    ExpectClose(RunTwice({DType::kF32, {7}},
                         [&](HostTensor& out) {
                           return LaunchCrossEntropy(logits.f32(), labels.i32(), out.f32(), 7, classes, kStream);
                         }),
                Reference(OpKind::kCrossEntropy, {logits, labels}), 2e-6, 1e-6, "cross_entropy" + what);
    ExpectClose(RunTwice(logits.type(),
                         [&](HostTensor& out) {
                           return LaunchCrossEntropyGrad(logits.f32(), labels.i32(), dy.f32(), out.f32(), 7, classes,
                                                         kStream);
                         }),
                Reference(OpKind::kCrossEntropyGrad, {logits, labels, dy}), 2e-6, 1e-7, "cross_entropy_grad" + what);
  }
}

}  // namespace
}  // namespace tandem::cuda::kernels
