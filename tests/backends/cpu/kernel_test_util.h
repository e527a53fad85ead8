// Helpers shared by the reference kernel tests: building a node for one op,
// evaluating it, and naive index arithmetic to compare against.
#ifndef TANDEM_TESTS_BACKENDS_CPU_KERNEL_TEST_UTIL_H_
#define TANDEM_TESTS_BACKENDS_CPU_KERNEL_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backends/cpu/kernels.h"
#include "gtest/gtest.h"
#include "ir/attributes.h"
#include "ir/graph.h"
#include "ir/host_tensor.h"
#include "ir/op.h"

namespace tandem::cpu::kernel_test {

constexpr float kInf = std::numeric_limits<float>::infinity();

inline ir::TensorType F32(ir::Shape shape) { return {ir::DType::kF32, std::move(shape)}; }
inline ir::TensorType I32(ir::Shape shape) { return {ir::DType::kI32, std::move(shape)}; }

// A node of `op` with result type `type`, whose operands are the values
// 0..n-1 (the kernels only look at the operand tensors).
inline ir::Node MakeNode(ir::OpKind op, ir::TensorType type, ir::Attributes attributes, size_t num_operands) {
  ir::Node node;
  node.op = op;
  node.type = std::move(type);
  node.attributes = std::move(attributes);
  for (size_t i = 0; i < num_operands; ++i) node.operands.push_back(static_cast<ir::ValueId>(i));
  return node;
}

inline absl::StatusOr<ir::HostTensor> TryEvaluate(ir::OpKind op, ir::TensorType type, ir::Attributes attributes,
                                                  std::vector<const ir::HostTensor*> operands) {
  ir::Node node = MakeNode(op, std::move(type), std::move(attributes), operands.size());
  return EvaluateNode(node, operands);
}

inline ir::HostTensor Evaluate(ir::OpKind op, ir::TensorType type, ir::Attributes attributes,
                               std::vector<const ir::HostTensor*> operands) {
  absl::StatusOr<ir::HostTensor> result =
      TryEvaluate(op, std::move(type), std::move(attributes), std::move(operands));
  EXPECT_TRUE(result.ok()) << result.status();
  if (!result.ok()) return ir::HostTensor();
  return *std::move(result);
}

inline std::vector<float> Values(const ir::HostTensor& tensor) {
  if (!tensor.defined()) return {};
  return std::vector<float>(tensor.floats().begin(), tensor.floats().end());
}

inline std::vector<float> RandomFloats(int64_t count, uint32_t seed, float low = -2.0f,
                                float high = 2.0f) {
  std::mt19937 engine(seed);
  std::uniform_real_distribution<float> distribution(low, high);
  std::vector<float> values(count);
  for (float& v : values) v = distribution(engine);
  return values;
}

inline ir::HostTensor RandomTensor(ir::Shape shape, uint32_t seed) {
  return ir::HostTensor::FromFloats(shape, RandomFloats(ir::NumElements(shape), seed));
}

inline std::vector<int64_t> Strides(const ir::Shape& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int axis = static_cast<int>(shape.size()) - 2; axis >= 0; --axis) {
    strides[axis] = strides[axis + 1] * shape[axis + 1];
  }
  return strides;
}

// The multi-index of flat position `flat` in `shape`.
inline std::vector<int64_t> Unflatten(int64_t flat, const ir::Shape& shape) {
  std::vector<int64_t> index(shape.size());
  for (int axis = static_cast<int>(shape.size()) - 1; axis >= 0; --axis) {
    index[axis] = flat % shape[axis];
    flat /= shape[axis];
  }
  return index;
}

// The flat position in `in_shape` (right-aligned, extent 1 broadcast) that
// output multi-index `out_index` reads.
inline int64_t BroadcastSource(const std::vector<int64_t>& out_index, const ir::Shape& in_shape) {
  const size_t offset = out_index.size() - in_shape.size();
  const std::vector<int64_t> strides = Strides(in_shape);
  int64_t flat = 0;
  for (size_t axis = 0; axis < in_shape.size(); ++axis) {
    if (in_shape[axis] != 1) flat += out_index[axis + offset] * strides[axis];
  }
  return flat;
}

}  // namespace tandem::cpu::kernel_test

#endif  // TANDEM_TESTS_BACKENDS_CPU_KERNEL_TEST_UTIL_H_
