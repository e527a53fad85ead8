// Every kernel of the CUDA backend (backends/cuda/kernels/), run on the
// CPU on CUDA's execution model (backends/cuda/cuda_on_cpu.h) and compared
// with the CPU reference kernels (cpu::RunGraph of the same op), at small and
// awkward shapes: several blocks, rows that are not a multiple of 32,
// ranks 1 to 4, broadcasting, empty tensors. Ops whose result IEEE fixes
// (add, maximum, conversions, copies, the embedding gradient's sums in
// position order) must agree bit for bit; sums the kernels fold in another
// order, and the host's libm against the reference's own routines, within
// a few ulp. Every launch runs twice and must give the same bits both times.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/interpreter.h"
#include "backends/cuda/cuda_kernels.cuh"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/graph_builder.h"
#include "ir/op_def.h"
#include "ir/shape_rules.h"

namespace tandem::cuda::kernels {
namespace {

using ir::DType;
using ir::HostTensor;
using ir::OpKind;

// The CPU reference's result of `op` on `operands`.
HostTensor Reference(OpKind op, const std::vector<HostTensor>& operands, ir::Attributes attributes = {}) {
  ir::Graph graph("reference");
  ir::GraphBuilder builder(&graph);
  std::vector<ir::ValueId> ids;
  ir::TensorMap inputs;
  for (size_t i = 0; i < operands.size(); ++i) {
    const std::string name = absl::StrCat("x", i);
    ids.push_back(builder.AddInput(name, ir::InputRole::kData, operands[i].type(), {}));
    inputs[name] = operands[i];
  }
  const ir::ValueId out = builder.Add(op, ids, std::move(attributes), {});
  EXPECT_TRUE(builder.ok()) << builder.status();
  if (!builder.ok()) return HostTensor();
  graph.AddOutput("out", out);
  absl::StatusOr<ir::TensorMap> result = cpu::RunGraph(graph, inputs);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? result->at("out") : HostTensor();
}

HostTensor Random(ir::Shape shape, float low, float high, uint32_t seed) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> uniform(low, high);
  int64_t n = 1;
  for (int64_t extent : shape) n *= extent;
  std::vector<float> values(static_cast<size_t>(n));
  for (float& value : values) value = uniform(generator);
  return HostTensor::FromFloats(std::move(shape), values);
}

HostTensor Ids(ir::Shape shape, int32_t limit, uint32_t seed) {
  std::mt19937 generator(seed);
  std::uniform_int_distribution<int32_t> uniform(0, limit - 1);
  int64_t n = 1;
  for (int64_t extent : shape) n *= extent;
  std::vector<int32_t> values(static_cast<size_t>(n));
  for (int32_t& value : values) value = uniform(generator);
  return HostTensor::FromInts(std::move(shape), values);
}

// A tensor of `like`'s type whose bytes the kernel writes.
HostTensor Output(const ir::TensorType& type) {
  HostTensor out(type);
  std::memset(out.data(), 0xA5, static_cast<size_t>(out.num_bytes()));  // no zeros a kernel could leave unwritten
  return out;
}

// Runs `launch` (which writes into its argument) twice: both results must
// have the same bits and the launches must succeed. Returns the first.
template <typename Launch>
HostTensor RunTwice(const ir::TensorType& type, const Launch& launch) {
  HostTensor first = Output(type), second = Output(type);
  EXPECT_EQ(launch(first), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(launch(second), cudaSuccess);
  EXPECT_EQ(std::memcmp(first.data(), second.data(), static_cast<size_t>(first.num_bytes())), 0)
      << "two runs of the same launch differ";
  return first;
}

void ExpectSameBits(const HostTensor& actual, const HostTensor& expected, const std::string& what) {
  ASSERT_EQ(actual.type(), expected.type()) << what;
  const int64_t bytes = expected.num_bytes();
  EXPECT_EQ(std::memcmp(actual.data(), expected.data(), static_cast<size_t>(bytes)), 0) << what;
  if (expected.type().dtype != DType::kF32) return;
  for (int64_t i = 0; i < expected.num_elements(); ++i) {
    if (std::memcmp(&actual.f32()[i], &expected.f32()[i], 4) != 0) {
      ADD_FAILURE() << what << ": element " << i << " is " << actual.f32()[i] << ", the reference's "
                    << expected.f32()[i];
      return;
    }
  }
}

// |actual - expected| <= relative * scale + absolute per element, NaN where
// the reference has NaN; `scale` is |expected| unless given per element.
void ExpectClose(const HostTensor& actual, const HostTensor& expected, double relative, double absolute,
                 const std::string& what, const std::vector<double>& scale = {}) {
  ASSERT_EQ(actual.type(), expected.type()) << what;
  int failures = 0;
  for (int64_t i = 0; i < expected.num_elements() && failures < 5; ++i) {
    const double e = expected.f32()[i], a = actual.f32()[i];
    if (std::isnan(e) || std::isnan(a)) {
      if (std::isnan(e) != std::isnan(a)) {
        ADD_FAILURE() << what << ": element " << i << " is " << a << ", the reference's " << e;
        ++failures;
      }
      continue;
    }
    if (std::isinf(e) || std::isinf(a)) {
      if (e != a) {
        ADD_FAILURE() << what << ": element " << i << " is " << a << ", the reference's " << e;
        ++failures;
      }
      continue;
    }
    const double bound = relative * (scale.empty() ? std::fabs(e) : scale[static_cast<size_t>(i)]) + absolute;
    if (std::fabs(a - e) > bound) {
      ADD_FAILURE() << what << ": element " << i << " is " << a << ", the reference's " << e << " (off by "
                    << std::fabs(a - e) << ", allowed " << bound << ")";
      ++failures;
    }
  }
}

// A row-major StridedMap for an output of `extents` over operands given by
// their shapes (broadcast along the axes where they have extent 1, aligned
// at the right).
StridedMap Broadcasting(const ir::Shape& extents, const std::vector<ir::Shape>& operands) {
  StridedMap map;
  map.rank = static_cast<int>(extents.size());
  map.num_operands = static_cast<int>(operands.size());
  for (int axis = 0; axis < map.rank; ++axis) map.extents[axis] = extents[static_cast<size_t>(axis)];
  for (size_t o = 0; o < operands.size(); ++o) {
    const ir::Shape& shape = operands[o];
    int64_t stride = 1;
    for (int axis = map.rank - 1; axis >= 0; --axis) {
      const int shape_axis = axis - (map.rank - static_cast<int>(shape.size()));
      const int64_t extent = shape_axis >= 0 ? shape[static_cast<size_t>(shape_axis)] : 1;
      map.strides[o][axis] = extent == 1 ? 0 : stride;
      stride *= extent;
    }
  }
  return map;
}

constexpr cudaStream_t kStream = nullptr;

// The ops of one family of the op table, so that a new op is tested here
// as soon as it is defined.
std::vector<OpKind> OpsOf(ir::OpFamily family) {
  std::vector<OpKind> ops;
  for (int kind = 0; kind < ir::kNumOpKinds; ++kind) {
    if (ir::Def(static_cast<OpKind>(kind)).family == family) ops.push_back(static_cast<OpKind>(kind));
  }
  return ops;
}

bool HasNan(const HostTensor& t) {
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    if (std::isnan(t.f32()[i])) return true;
  }
  return false;
}

TEST(CudaKernelsOnCpu, UnaryOpsMatchTheReferenceWithinAFewUlp) {
  const std::vector<OpKind> ops = OpsOf(ir::OpFamily::kUnary);
  ASSERT_GE(ops.size(), 11u);
  for (OpKind op : ops) {
    // Ops undefined below zero (log, sqrt) are drawn from positive numbers.
    const bool positive = HasNan(Reference(op, {Random({64}, -6.0f, -0.01f, 7)}));
    for (int64_t n : {int64_t{1}, int64_t{1000}}) {  // 1000: four blocks, the last one partial
      const HostTensor x = Random({n}, positive ? 0.01f : -6.0f, 6.0f, 7);
      const HostTensor expected = Reference(op, {x});
      const HostTensor actual = RunTwice(x.type(), [&](HostTensor& out) {
        return LaunchUnary(op, {x.f32()}, {out.f32()}, n, kStream);
      });
      ExpectClose(actual, expected, 4e-7, 1e-7, absl::StrCat(ir::OpName(op), " n=", n));
    }
  }
  // An empty tensor launches nothing.
  EXPECT_EQ(LaunchUnary(OpKind::kExp, {}, {}, 0, kStream), cudaSuccess);
}

TEST(CudaKernelsOnCpu, BinaryOpsBroadcastAndMatchTheReference) {
  const ir::Shape x_shape = {3, 1, 5}, y_shape = {4, 5}, out_shape = {3, 4, 5};
  HostTensor x = Random(x_shape, -2.0f, 2.0f, 1);
  HostTensor y = Random(y_shape, -2.0f, 2.0f, 2);
  y.f32()[3] = x.f32()[3];  // some equal pairs for equal and maximum's ties
  y.f32()[7] = NAN;
  const StridedMap map = Broadcasting(out_shape, {x_shape, y_shape});
  // Ops whose result IEEE fixes; the rest within a few ulp.
  const std::vector<OpKind> exact = {OpKind::kAdd, OpKind::kSub,     OpKind::kMul,
                                     OpKind::kDiv, OpKind::kMaximum, OpKind::kEqual};
  const std::vector<OpKind> ops = OpsOf(ir::OpFamily::kBinary);
  ASSERT_GE(ops.size(), 10u);
  int broadcast = 0;
  for (OpKind op : ops) {
    if (!ir::InferResultType(op, {x.type(), y.type()}, {}).ok()) continue;  // the (x, dy) helpers: below
    ++broadcast;
    HostTensor base = x;
    if (op == OpKind::kPow) {
      for (int64_t i = 0; i < base.num_elements(); ++i) base.f32()[i] = std::fabs(base.f32()[i]) + 0.1f;
    }
    const HostTensor expected = Reference(op, {base, y});
    const HostTensor actual = RunTwice({DType::kF32, out_shape}, [&](HostTensor& out) {
      return LaunchBinary(op, {base.f32()}, {y.f32()}, {out.f32()}, map, kStream);
    });
    if (std::find(exact.begin(), exact.end(), op) != exact.end()) {
      ExpectSameBits(actual, expected, ir::OpName(op));
    } else {
      ExpectClose(actual, expected, 4e-7, 0, ir::OpName(op));
    }
  }
  EXPECT_GE(broadcast, 7);
  // The gradient helpers take (x, dy) of one shape; rank 1 and rank 4.
  for (const ir::Shape& shape : std::vector<ir::Shape>{{300}, {2, 3, 4, 5}}) {
    const HostTensor a = Random(shape, -4.0f, 4.0f, 3), dy = Random(shape, -1.0f, 1.0f, 4);
    const StridedMap same = Broadcasting(shape, {shape, shape});
    for (OpKind op : ops) {
      if (ir::InferResultType(op, {x.type(), y.type()}, {}).ok()) continue;
      const HostTensor expected = Reference(op, {a, dy});
      const HostTensor actual = RunTwice(a.type(), [&](HostTensor& out) {
        return LaunchBinary(op, {a.f32()}, {dy.f32()}, {out.f32()}, same, kStream);
      });
      ExpectClose(actual, expected, 1e-6, 1e-7, absl::StrCat(ir::OpName(op), " rank ", shape.size()));
    }
  }
}

TEST(CudaKernelsOnCpu, WhereBroadcastsItsThreeOperandsExactly) {
  const ir::Shape cond_shape = {3, 1, 1}, x_shape = {4, 5}, y_shape = {3, 4, 5}, out_shape = {3, 4, 5};
  const HostTensor cond = HostTensor::FromFloats(cond_shape, {1.0f, 0.0f, -2.0f});
  const HostTensor x = Random(x_shape, -1, 1, 5), y = Random(y_shape, -1, 1, 6);
  const HostTensor expected = Reference(OpKind::kWhere, {cond, x, y});
  const StridedMap map = Broadcasting(out_shape, {cond_shape, x_shape, y_shape});
  const HostTensor actual = RunTwice({DType::kF32, out_shape}, [&](HostTensor& out) {
    return LaunchWhere({cond.f32()}, {x.f32()}, {y.f32()}, {out.f32()}, map, kStream);
  });
  ExpectSameBits(actual, expected, "where");
}

// `x` (f32) rounded to bf16 by the conversion kernel, and back.
HostTensor ToBf16(const HostTensor& x) {
  HostTensor out({DType::kBF16, x.type().shape});
  EXPECT_EQ(LaunchConvert(ConvertOp::kF32ToBf16, x.data(), out.data(), x.num_elements(), kStream), cudaSuccess);
  return out;
}
HostTensor ToF32(const HostTensor& x) {
  HostTensor out({DType::kF32, x.type().shape});
  EXPECT_EQ(LaunchConvert(ConvertOp::kBf16ToF32, x.data(), out.data(), x.num_elements(), kStream), cudaSuccess);
  return out;
}

TEST(CudaKernelsOnCpu, ElementwiseKernelsOnBf16GiveTheBitsOfWideningAndNarrowing) {
  // bf16 operands and results in one kernel against widen, f32 kernel,
  // narrow: every unary op, every broadcasting binary op, and where.
  const ir::Shape x_shape = {3, 1, 5}, y_shape = {4, 5}, out_shape = {3, 4, 5};
  const HostTensor x16 = ToBf16(Random(x_shape, 0.05f, 3.0f, 11)), y16 = ToBf16(Random(y_shape, -3.0f, 3.0f, 12));
  const HostTensor x = ToF32(x16), y = ToF32(y16);
  for (OpKind op : OpsOf(ir::OpFamily::kUnary)) {
    const HostTensor one = RunTwice(x16.type(), [&](HostTensor& out) {
      return LaunchUnary(op, {x16.data(), true}, {out.data(), true}, x.num_elements(), kStream);
    });
    const HostTensor wide = RunTwice(x.type(), [&](HostTensor& out) {
      return LaunchUnary(op, {x.f32()}, {out.f32()}, x.num_elements(), kStream);
    });
    ExpectSameBits(one, ToBf16(wide), ir::OpName(op));
  }
  const StridedMap map = Broadcasting(out_shape, {x_shape, y_shape});
  for (OpKind op : OpsOf(ir::OpFamily::kBinary)) {
    if (!ir::InferResultType(op, {x.type(), y.type()}, {}).ok()) continue;
    const HostTensor one = RunTwice({DType::kBF16, out_shape}, [&](HostTensor& out) {
      return LaunchBinary(op, {x16.data(), true}, {y16.data(), true}, {out.data(), true}, map, kStream);
    });
    const HostTensor wide = RunTwice({DType::kF32, out_shape}, [&](HostTensor& out) {
      return LaunchBinary(op, {x.f32()}, {y.f32()}, {out.f32()}, map, kStream);
    });
    ExpectSameBits(one, ToBf16(wide), ir::OpName(op));
  }
  const HostTensor cond = ToBf16(HostTensor::FromFloats({3, 1, 1}, {1.0f, 0.0f, 1.0f}));
  const StridedMap where_map = Broadcasting(out_shape, {{3, 1, 1}, y_shape, out_shape});
  const HostTensor z16 = ToBf16(Random(out_shape, -1.0f, 1.0f, 13));
  const HostTensor picked = RunTwice({DType::kBF16, out_shape}, [&](HostTensor& out) {
    return LaunchWhere({cond.data(), true}, {y16.data(), true}, {z16.data(), true}, {out.data(), true}, where_map,
                       kStream);
  });
  const HostTensor wide = RunTwice({DType::kF32, out_shape}, [&](HostTensor& out) {
    const HostTensor z = ToF32(z16);
    return LaunchWhere({ToF32(cond).f32()}, {y.f32()}, {z.f32()}, {out.f32()}, where_map, kStream);
  });
  ExpectSameBits(picked, ToBf16(wide), "where");
}

TEST(CudaKernelsOnCpu, ConversionsRoundAsTheReferenceDoes) {
  HostTensor f = HostTensor::FromFloats(
      {12}, {0.0f, -0.0f, 1.5f, -1.5f, 2.5f, 1e10f, -1e10f, INFINITY, -INFINITY, 1.00390625f, 1.01171875f, 3.0e38f});
  const HostTensor i = HostTensor::FromInts({6}, {0, 1, -1, 16777217, -2147483647 - 1, 2147483647});
  auto convert = [](const HostTensor& in, DType to) {
    return Reference(OpKind::kConvert, {in}, {{"dtype", std::string(ir::DTypeName(to))}});
  };
  const HostTensor to_i32 = RunTwice({DType::kI32, f.shape()}, [&](HostTensor& out) {
    return LaunchConvert(ConvertOp::kF32ToI32, f.data(), out.data(), f.num_elements(), kStream);
  });
  ExpectSameBits(to_i32, convert(f, DType::kI32), "f32 -> i32");
  const HostTensor to_f32 = RunTwice({DType::kF32, i.shape()}, [&](HostTensor& out) {
    return LaunchConvert(ConvertOp::kI32ToF32, i.data(), out.data(), i.num_elements(), kStream);
  });
  ExpectSameBits(to_f32, convert(i, DType::kF32), "i32 -> f32");
  const HostTensor to_bf16 = RunTwice({DType::kBF16, f.shape()}, [&](HostTensor& out) {
    return LaunchConvert(ConvertOp::kF32ToBf16, f.data(), out.data(), f.num_elements(), kStream);
  });
  ExpectSameBits(to_bf16, convert(f, DType::kBF16), "f32 -> bf16 (ties to even)");
  const HostTensor matmul_operand = RunTwice({DType::kBF16, f.shape()}, [&](HostTensor& out) {
    return LaunchToBf16(f.f32(), out.data(), f.num_elements(), kStream);
  });
  ExpectSameBits(matmul_operand, to_bf16, "LaunchToBf16");
  const HostTensor back = RunTwice({DType::kF32, f.shape()}, [&](HostTensor& out) {
    return LaunchConvert(ConvertOp::kBf16ToF32, to_bf16.data(), out.data(), f.num_elements(), kStream);
  });
  ExpectSameBits(back, convert(to_bf16, DType::kF32), "bf16 -> f32");
  const HostTensor bf16_to_i32 = RunTwice({DType::kI32, f.shape()}, [&](HostTensor& out) {
    return LaunchConvert(ConvertOp::kBf16ToI32, to_bf16.data(), out.data(), f.num_elements(), kStream);
  });
  ExpectSameBits(bf16_to_i32, convert(to_bf16, DType::kI32), "bf16 -> i32");
  const HostTensor i32_to_bf16 = RunTwice({DType::kBF16, i.shape()}, [&](HostTensor& out) {
    return LaunchConvert(ConvertOp::kI32ToBf16, i.data(), out.data(), i.num_elements(), kStream);
  });
  ExpectSameBits(i32_to_bf16, convert(i, DType::kBF16), "i32 -> bf16");

  // A NaN stays a NaN. Its bits do not: the GPU writes bf16's canonical NaN
  // (0x7fff, cuda_bf16.hpp), the reference keeps the sign and payload.
  const HostTensor nan = HostTensor::FromFloats({2}, {NAN, -NAN});
  const HostTensor nan_bf16 = RunTwice({DType::kBF16, nan.shape()}, [&](HostTensor& out) {
    return LaunchConvert(ConvertOp::kF32ToBf16, nan.data(), out.data(), 2, kStream);
  });
  const HostTensor nan_back = convert(nan_bf16, DType::kF32);
  EXPECT_TRUE(std::isnan(nan_back.f32()[0]) && std::isnan(nan_back.f32()[1]));
  const HostTensor nan_to_i32 = RunTwice({DType::kI32, nan.shape()}, [&](HostTensor& out) {
    return LaunchConvert(ConvertOp::kF32ToI32, nan.data(), out.data(), 2, kStream);
  });
  ExpectSameBits(nan_to_i32, convert(nan, DType::kI32), "NaN -> i32");
}

TEST(CudaKernelsOnCpu, GatherTransposesAndBroadcastsBothElementSizes) {
  // transpose([2,3,5], {2,0,1}) -> [5,2,3]: output axis a reads input axis perm[a].
  const HostTensor x = Random({2, 3, 5}, -1, 1, 8);
  const HostTensor expected = Reference(OpKind::kTranspose, {x}, {{"permutation", std::vector<int64_t>{2, 0, 1}}});
  StridedMap map;
  map.rank = 3;
  map.num_operands = 1;
  const int64_t extents[3] = {5, 2, 3}, strides[3] = {1, 15, 5};
  for (int axis = 0; axis < 3; ++axis) {
    map.extents[axis] = extents[axis];
    map.strides[0][axis] = strides[axis];
  }
  const HostTensor actual = RunTwice(expected.type(), [&](HostTensor& out) {
    return LaunchGather(x.data(), out.data(), 4, map, kStream);
  });
  ExpectSameBits(actual, expected, "transpose f32");
  // broadcast_to(bf16 [1,3] -> [300,3]): 900 elements, several blocks.
  const HostTensor row = Reference(OpKind::kConvert, {Random({1, 3}, -1, 1, 9)}, {{"dtype", std::string("bf16")}});
  const HostTensor wide = Reference(OpKind::kBroadcast, {row}, {{"shape", std::vector<int64_t>{300, 3}}});
  const StridedMap repeat = Broadcasting({300, 3}, {{1, 3}});
  const HostTensor gathered = RunTwice(wide.type(), [&](HostTensor& out) {
    return LaunchGather(row.data(), out.data(), 2, repeat, kStream);
  });
  ExpectSameBits(gathered, wide, "broadcast bf16");
  EXPECT_EQ(LaunchGather(x.data(), nullptr, 8, map, kStream), cudaErrorInvalidValue) << "8-byte elements";
}

TEST(CudaKernelsOnCpu, CopyRowsSlicesAsTheReference) {
  const HostTensor x = Random({70, 10}, -1, 1, 10);
  const HostTensor expected =
      Reference(OpKind::kSlice, {x}, {{"axis", int64_t{1}}, {"start", int64_t{3}}, {"limit", int64_t{8}}});
  const HostTensor actual = RunTwice(expected.type(), [&](HostTensor& out) {
    return LaunchCopyRows(x.f32() + 3, 10, out.data(), 5, 70, 5, 4, kStream);
  });
  ExpectSameBits(actual, expected, "slice");
}

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

TEST(CudaKernelsOnCpu, FewOutputsOfManyElementsAreReducedInChunksOfAFixedLength) {
  // 65536 elements a chunk, whatever the GPU: 300000 -> 5 chunks; 3 rows of
  // 140000 -> 3 x 3; one chunk or many outputs -> one pass, no scratch.
  EXPECT_EQ(ReduceScratchBytes(PlanOf({300000}, {0})), 5 * sizeof(float));
  EXPECT_EQ(ReduceScratchBytes(PlanOf({3, 140000}, {1})), 9 * sizeof(float));
  EXPECT_EQ(ReduceScratchBytes(PlanOf({65536}, {0})), 0u);
  EXPECT_EQ(ReduceScratchBytes(PlanOf({2000, 70000}, {1})), 0u);
}

TEST(CudaKernelsOnCpu, ReductionsMatchTheReferenceInEveryLayout) {
  struct Case {
    ir::Shape shape;
    std::vector<int64_t> axes;
  };
  // Rows longer than a block (one output a block), columns (32 neighbouring
  // outputs a block, the last block partial), two separated axes, all axes;
  // and reductions past one chunk into few outputs, which take two passes
  // (the whole of 140000 elements, rows of 70000, columns of 66000).
  for (const Case& c : std::vector<Case>{{{2, 3, 300}, {2}},
                                         {{600, 70}, {0}},
                                         {{5, 33, 7}, {0, 2}},
                                         {{37}, {0}},
                                         {{140000}, {0}},
                                         {{2, 70000}, {1}},
                                         {{66000, 2}, {0}}}) {
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
      const HostTensor actual = RunTwice(expected.type(), [&](HostTensor& out) {
        return LaunchReduce(op, x.f32(), out.f32(), plan, scratch.data(), kStream);
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
      const HostTensor actual = RunTwice(x.type(), [&](HostTensor& out) {
        return LaunchRows(op, x.f32(), nullptr, out.f32(), rows, length, kStream);
      });
      ExpectClose(actual, y, 2e-6, 2e-7, absl::StrCat(ir::OpName(kind), what));
      const HostTensor expected_grad = Reference(grad_kind, {y, dy});
      const HostTensor actual_grad = RunTwice(x.type(), [&](HostTensor& out) {
        return LaunchRows(grad, y.f32(), dy.f32(), out.f32(), rows, length, kStream);
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
                           return LaunchNormalization(NormOp::kNormalize, x.f32(), nullptr, nullptr, out.f32(), 2,
                                                      length, 1e-5f, kStream);
                         }),
                Reference(OpKind::kNormalize, {x}, eps), 1e-5, 1e-6, "normalize" + what);
    ExpectClose(RunTwice(x.type(),
                         [&](HostTensor& out) {
                           return LaunchNormalization(NormOp::kLayerNorm, x.f32(), gamma.f32(), beta.f32(), out.f32(),
                                                      2, length, 1e-5f, kStream);
                         }),
                Reference(OpKind::kLayerNorm, {x, gamma, beta}, eps), 1e-5, 1e-6, "layer_norm" + what);
    ExpectClose(RunTwice(x.type(),
                         [&](HostTensor& out) {
                           return LaunchNormalization(NormOp::kNormalizeGrad, x.f32(), dy.f32(), nullptr, out.f32(), 2,
                                                      length, 1e-5f, kStream);
                         }),
                Reference(OpKind::kNormalizeGrad, {x, dy}, eps), 1e-4, 1e-5, "normalize_grad" + what);
  }
}

TEST(CudaKernelsOnCpu, CausalMaskAndRotaryMatchTheReference) {
  const HostTensor scores = Random({2, 3, 7, 7}, -1, 1, 18);
  const HostTensor masked = RunTwice(scores.type(), [&](HostTensor& out) {
    return LaunchCausalMask(scores.f32(), out.f32(), 6, 7, 7, -INFINITY, kStream);
  });
  ExpectSameBits(masked, Reference(OpKind::kCausalMask, {scores}, {{"fill", -INFINITY}}), "causal_mask");
  const HostTensor q = Random({2, 40, 8}, -1, 1, 19);
  for (bool inverse : {false, true}) {
    const HostTensor rotated = RunTwice(q.type(), [&](HostTensor& out) {
      return LaunchRotary(q.f32(), nullptr, out.f32(), 2, 40, 8, 10000.0, inverse, kStream);
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
    return LaunchRotary(q.f32(), positions.i32(), out.f32(), 2, 40, 8, 10000.0, false, kStream);
  });
  ExpectClose(rotated, Reference(OpKind::kRotary, {q, positions}, {{"theta", 10000.0}, {"inverse", int64_t{0}}}),
              1e-6, 1e-6, "rotary at positions");
}

TEST(CudaKernelsOnCpu, AttentionAtPositionsAgainstACacheMatchesTheReference) {
  // Three queries per sequence against a cache of 9 keys, each query at a
  // position of its own.
  const HostTensor q = Random({2, 4, 3, 6}, -1, 1, 34), k = Random({2, 2, 9, 6}, -1, 1, 35),
                   v = Random({2, 2, 9, 6}, -1, 1, 36);
  const HostTensor positions = HostTensor::FromInts({2, 3}, {0, 4, 8, 2, 2, 7});
  const HostTensor out = RunTwice(q.type(), [&](HostTensor& result) {
    return LaunchAttention(q.f32(), k.f32(), v.f32(), positions.i32(), result.f32(), 2, 4, 2, 3, 9, 6, 0.4f,
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
    return LaunchAttention(q.f32(), k.f32(), v.f32(), nullptr, result.f32(), 2, 4, 2, 11, 11, 6, 0.4f, kStream);
  });
  ExpectClose(out, Reference(OpKind::kAttention, {q, k, v}, scale), 1e-5, 1e-6, "attention");
  const int64_t n_q = q.num_elements(), n_kv = k.num_elements();
  std::vector<float> scratch(AttentionGradScratchBytes(2 * 4 * 11) / sizeof(float));
  const HostTensor grads = RunTwice({DType::kF32, {n_q + 2 * n_kv}}, [&](HostTensor& result) {
    float* dq = result.f32();
    return LaunchAttentionGrad(q.f32(), k.f32(), v.f32(), dy.f32(), dq, dq + n_q, dq + n_q + n_kv, 2, 4, 2, 11, 6,
                               0.4f, scratch.data(), kStream);
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
    return LaunchAttention(q.f32(), k.f32(), v.f32(), nullptr, result.f32(), 1, 4, 2, 70, 70, 8, 0.3f, kStream);
  });
  ExpectClose(out, Reference(OpKind::kAttention, {q, k, v}, {{"scale", 0.3}}), 1e-5, 1e-6, "tiled attention");
  // The gradient over as many tiles: two blocks of query rows, two of key
  // rows, three query tiles per head.
  const HostTensor dy = Random({1, 4, 70, 8}, -1, 1, 45);
  const int64_t n_q = q.num_elements(), n_kv = k.num_elements();
  std::vector<float> scratch(AttentionGradScratchBytes(4 * 70) / sizeof(float));
  const HostTensor grads = RunTwice({DType::kF32, {n_q + 2 * n_kv}}, [&](HostTensor& result) {
    float* dq = result.f32();
    return LaunchAttentionGrad(q.f32(), k.f32(), v.f32(), dy.f32(), dq, dq + n_q, dq + n_q + n_kv, 1, 4, 2, 70, 8,
                               0.3f, scratch.data(), kStream);
  });
  ExpectClose(grads, Reference(OpKind::kAttentionGrad, {q, k, v, dy}, {{"scale", 0.3}}), 1e-4, 1e-5,
              "tiled attention_grad");

  const HostTensor cache_k = Random({1, 2, 100, 8}, -1, 1, 43), cache_v = Random({1, 2, 100, 8}, -1, 1, 44);
  std::vector<int32_t> at(70);
  for (size_t i = 0; i < at.size(); ++i) at[i] = static_cast<int32_t>((i * 37) % 100);
  const HostTensor positions = HostTensor::FromInts({1, 70}, at);
  const HostTensor cached = RunTwice(q.type(), [&](HostTensor& result) {
    return LaunchAttention(q.f32(), cache_k.f32(), cache_v.f32(), positions.i32(), result.f32(), 1, 4, 2, 70, 100, 8,
                           0.3f, kStream);
  });
  ExpectClose(cached, Reference(OpKind::kAttention, {q, cache_k, cache_v, positions}, {{"scale", 0.3}}), 1e-5, 1e-6,
              "tiled attention at positions");
}

TEST(CudaKernelsOnCpu, TheRangeCheckFindsTheFirstBadIdWhateverTheThreadsFindFirst) {
  std::vector<int32_t> values(1000, 3);
  values[700] = 10;  // found early by its thread's share, later in index order
  values[301] = -1;
  RangeCheckResult result{};
  ASSERT_EQ(LaunchFindFirstOutOfRange(values.data(), 1000, 10, &result, kStream), cudaSuccess);
  EXPECT_EQ(result.position, 301);
  EXPECT_EQ(result.value, -1);
  values[301] = 9;
  ASSERT_EQ(LaunchFindFirstOutOfRange(values.data(), 1000, 10, &result, kStream), cudaSuccess);
  EXPECT_EQ(result.position, 700);
  values[700] = 0;
  ASSERT_EQ(LaunchFindFirstOutOfRange(values.data(), 1000, 10, &result, kStream), cudaSuccess);
  EXPECT_EQ(result.position, -1);
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

TEST(CudaKernelsOnCpu, EmbeddingAndItsGradientAreTheReferencesBits) {
  for (int64_t width : {int64_t{6}, int64_t{300}}) {  // 32 and 256 threads a row
    const HostTensor table = Random({10, width}, -1, 1, 23);
    const HostTensor ids = Ids({3, 14}, 10, 24);  // 42 positions, ids repeated
    const std::string what = absl::StrCat(" width ", width);
    ExpectSameBits(RunTwice({DType::kF32, {3, 14, width}},
                            [&](HostTensor& out) {
                              return LaunchEmbedding(table.f32(), ids.i32(), out.f32(), 42, 10, width, kStream);
                            }),
                   Reference(OpKind::kEmbedding, {table, ids}), "embedding" + what);
    const HostTensor dy = Random({3, 14, width}, -1, 1, 25);
    std::vector<std::byte> scratch(EmbeddingGradScratchBytes(42));
    ExpectSameBits(RunTwice({DType::kF32, {10, width}},
                            [&](HostTensor& out) {
                              return LaunchEmbeddingGrad(ids.i32(), dy.f32(), out.f32(), 42, 10, width,
                                                         scratch.data(), kStream);
                            }),
                   Reference(OpKind::kEmbeddingGrad, {ids, dy}, {{"num_embeddings", int64_t{10}}}),
                   "embedding_grad (sums in position order)" + what);
  }
}

TEST(CudaKernelsOnCpu, FillAndTheOrderedSumOfReplicasAreExact) {
  const HostTensor filled = RunTwice({DType::kF32, {1000}}, [&](HostTensor& out) {
    uint32_t bits;
    const float value = -2.5f;
    std::memcpy(&bits, &value, 4);
    return LaunchFill32(bits, out.data(), 1000, kStream);
  });
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(filled.f32()[i], -2.5f) << i;
  const HostTensor slots = Random({3, 1000}, -1e3f, 1e3f, 26);
  const HostTensor summed = RunTwice({DType::kF32, {1000}}, [&](HostTensor& out) {
    return LaunchSumInOrder(slots.f32(), 1000, 3, out.f32(), 1000, kStream);
  });
  for (int64_t i = 0; i < 1000; ++i) {
    const float expected = (slots.f32()[i] + slots.f32()[1000 + i]) + slots.f32()[2000 + i];
    ASSERT_EQ(std::memcmp(&summed.f32()[i], &expected, 4), 0) << i;
  }
}

}  // namespace
}  // namespace tandem::cuda::kernels
