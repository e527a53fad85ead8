// What the tests of the CUDA backend's kernels on the CPU share
// (cuda_kernels_on_cpu_test.cc, cuda_row_kernels_on_cpu_test.cc): the
// reference's result of one op, inputs, launches run twice, and
// comparisons bit for bit or within a tolerance.
#ifndef TANDEM_TESTS_BACKENDS_CUDA_KERNELS_ON_CPU_UTIL_H_
#define TANDEM_TESTS_BACKENDS_CUDA_KERNELS_ON_CPU_UTIL_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/interpreter.h"
#include "backends/cuda/cuda_kernels.cuh"
#include "gtest/gtest.h"
#include "ir/graph_builder.h"
#include "ir/op_def.h"

namespace tandem::cuda::kernels {

using ir::DType;
using ir::HostTensor;
using ir::OpKind;

inline constexpr cudaStream_t kStream = nullptr;

// The CPU reference's result of `op` on `operands`.
inline HostTensor Reference(OpKind op, const std::vector<HostTensor>& operands, ir::Attributes attributes = {}) {
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

inline HostTensor Random(ir::Shape shape, float low, float high, uint32_t seed) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> uniform(low, high);
  int64_t n = 1;
  for (int64_t extent : shape) n *= extent;
  std::vector<float> values(static_cast<size_t>(n));
  for (float& value : values) value = uniform(generator);
  return HostTensor::FromFloats(std::move(shape), values);
}

inline HostTensor Ids(ir::Shape shape, int32_t limit, uint32_t seed) {
  std::mt19937 generator(seed);
  std::uniform_int_distribution<int32_t> uniform(0, limit - 1);
  int64_t n = 1;
  for (int64_t extent : shape) n *= extent;
  std::vector<int32_t> values(static_cast<size_t>(n));
  for (int32_t& value : values) value = uniform(generator);
  return HostTensor::FromInts(std::move(shape), values);
}

// `t` (from its element `first` on) as a kernel's operand or result: f32 or
// bf16 storage, as its dtype says.
inline ElementsIn In(const HostTensor& t, int64_t first = 0) {
  return {t.data() + first * ir::DTypeSize(t.dtype()), t.dtype() == DType::kBF16};
}
inline ElementsOut Out(HostTensor& t, int64_t first = 0) {
  return {t.data() + first * ir::DTypeSize(t.dtype()), t.dtype() == DType::kBF16};
}

// A tensor of `like`'s type whose bytes the kernel writes.
inline HostTensor Output(const ir::TensorType& type) {
  HostTensor out(type);
  std::memset(out.data(), 0xA5, static_cast<size_t>(out.num_bytes()));  // no zeros a kernel could leave unwritten
  return out;
}

// Runs `launch` (which writes into its argument) twice: both results must
// have the same bits and the launches must succeed. Returns the first.
template <typename Launch>
inline HostTensor RunTwice(const ir::TensorType& type, const Launch& launch) {
  HostTensor first = Output(type), second = Output(type);
  EXPECT_EQ(launch(first), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(launch(second), cudaSuccess);
  EXPECT_EQ(std::memcmp(first.data(), second.data(), static_cast<size_t>(first.num_bytes())), 0)
      << "two runs of the same launch differ";
  return first;
}

inline void ExpectSameBits(const HostTensor& actual, const HostTensor& expected, const std::string& what) {
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

// `x` (f32) rounded to bf16 by the conversion kernel, and back.
inline HostTensor ToBf16(const HostTensor& x) {
  HostTensor out({DType::kBF16, x.type().shape});
  EXPECT_EQ(LaunchConvert(ConvertOp::kF32ToBf16, x.data(), out.data(), x.num_elements(), kStream), cudaSuccess);
  return out;
}
inline HostTensor ToF32(const HostTensor& x) {
  HostTensor out({DType::kF32, x.type().shape});
  EXPECT_EQ(LaunchConvert(ConvertOp::kBf16ToF32, x.data(), out.data(), x.num_elements(), kStream), cudaSuccess);
  return out;
}

// `launch(operands, out)` on the bf16 `operands16` into a bf16 result of
// `shape` gives the bits of the same launch on them widened to f32 with its
// f32 result narrowed: one kernel that widens as it loads and rounds once
// as it stores computes what widen, the f32 kernel and narrow do.
template <typename Launch>
inline void ExpectBf16GivesTheBitsOfF32(const std::vector<HostTensor>& operands16, const ir::Shape& shape,
                                        const Launch& launch, const std::string& what) {
  std::vector<HostTensor> wide;
  for (const HostTensor& operand : operands16) wide.push_back(ToF32(operand));
  const HostTensor one = RunTwice({DType::kBF16, shape}, [&](HostTensor& out) { return launch(operands16, out); });
  HostTensor f32 = Output({DType::kF32, shape});  // the f32 launch's repeatability is its own tests' business
  EXPECT_EQ(launch(wide, f32), cudaSuccess) << what;
  ExpectSameBits(one, ToBf16(f32), what);
}

// |actual - expected| <= relative * scale + absolute per element, NaN where
// the reference has NaN; `scale` is |expected| unless given per element.
inline void ExpectClose(const HostTensor& actual, const HostTensor& expected, double relative, double absolute,
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
inline StridedMap Broadcasting(const ir::Shape& extents, const std::vector<ir::Shape>& operands) {
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

// The ops of one family of the op table, so that a new op is tested here
// as soon as it is defined.
inline std::vector<OpKind> OpsOf(ir::OpFamily family) {
  std::vector<OpKind> ops;
  for (int kind = 0; kind < ir::kNumOpKinds; ++kind) {
    if (ir::Def(static_cast<OpKind>(kind)).family == family) ops.push_back(static_cast<OpKind>(kind));
  }
  return ops;
}

inline bool HasNan(const HostTensor& t) {
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    if (std::isnan(t.f32()[i])) return true;
  }
  return false;
}

}  // namespace tandem::cuda::kernels

#endif  // TANDEM_TESTS_BACKENDS_CUDA_KERNELS_ON_CPU_UTIL_H_
