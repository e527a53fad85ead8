// The op cases the CUDA backend is checked with: for every op kind of
// ir/op.h, small graphs (broadcasting, transposes, special values) with
// their inputs, run by the test on the CPU reference and on the GPU.
#ifndef TANDEM_TESTS_BACKENDS_CUDA_OP_CASES_H_
#define TANDEM_TESTS_BACKENDS_CUDA_OP_CASES_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "ir/graph.h"
#include "ir/graph_builder.h"
#include "ir/host_tensor.h"
#include "ir/op.h"
#include "tests/backends/cpu/kernel_test_util.h"

namespace tandem::cuda::testing {

using ir::Attributes;
using ir::DType;
using ir::HostTensor;
using ir::OpKind;
using ir::Shape;
using ir::TensorType;
using ir::ValueId;

inline constexpr float kInf = std::numeric_limits<float>::infinity();
inline constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

inline TensorType F32(Shape shape) { return {DType::kF32, std::move(shape)}; }

// Uniform values in [low, high), the reference kernel tests' generator.
inline HostTensor Floats(const Shape& shape, uint32_t seed, float low = -2.0f, float high = 2.0f) {
  return HostTensor::FromFloats(shape, cpu::kernel_test::RandomFloats(ir::NumElements(shape), seed, low, high));
}

// Multiples of 1/16 in [0.5, 1.5]: any sum of fewer than 2^19 of them is
// exact in f32 (23 bits above the 1/16 step), so every order of summation
// gives the same bits.
inline HostTensor Sixteenths(const Shape& shape, uint32_t seed) {
  std::mt19937 engine(seed);
  std::uniform_int_distribution<int> distribution(8, 24);
  std::vector<float> values(static_cast<size_t>(ir::NumElements(shape)));
  for (float& v : values) v = static_cast<float>(distribution(engine)) / 16.0f;
  return HostTensor::FromFloats(shape, values);
}

// Small integers as f32, so that equal() and where() see ties and zeros.
inline HostTensor SmallIntegers(const Shape& shape, uint32_t seed, int high) {
  std::mt19937 engine(seed);
  std::uniform_int_distribution<int> distribution(0, high);
  std::vector<float> values(static_cast<size_t>(ir::NumElements(shape)));
  for (float& v : values) v = static_cast<float>(distribution(engine));
  return HostTensor::FromFloats(shape, values);
}

inline HostTensor Ids(const Shape& shape, std::vector<int32_t> values) {
  return HostTensor::FromInts(shape, values);
}

// A graph and its inputs.
struct OpCase {
  ir::Graph graph;
  ir::TensorMap inputs;
};

// Appends to an OpCase: inputs with their values, ops, outputs "out0", ...
class CaseBuilder {
 public:
  explicit CaseBuilder(OpCase& c) : case_(c), builder_(&c.graph) {}

  ValueId Input(const std::string& name, HostTensor value) {
    case_.inputs[name] = value;
    return builder_.AddInput(name, "data", value.type(), Location());
  }
  ValueId Op(OpKind op, std::vector<ValueId> operands, Attributes attributes = {}) {
    return builder_.Add(op, std::move(operands), std::move(attributes), Location());
  }
  ValueId Constant(double value, TensorType type) {
    return builder_.AddConstant(value, std::move(type), Location());
  }
  void Output(ValueId value) {
    case_.graph.AddOutput(absl::StrCat("out", case_.graph.outputs().size()), value);
  }
  const absl::Status& status() const { return builder_.status(); }

 private:
  static ir::SourceLocation Location() { return ir::MakeSourceLocation(__FILE__, 1); }

  OpCase& case_;
  ir::GraphBuilder builder_;
};

struct OpCaseSpec {
  std::string name;
  std::function<void(CaseBuilder&)> build;
  // LargeShapeCases: the most max |gpu - cpu| may be, relative to max |cpu|.
  double in_norm = 1e-5;
};
// Names the case in failure messages instead of dumping its bytes.
inline void PrintTo(const OpCaseSpec& spec, std::ostream* os) { *os << spec.name; }

// One case per name; together they cover every op kind.
std::vector<OpCaseSpec> AllCases();

// Shapes that take the kernels' other configurations: rows long enough for
// 128 and 256 threads per row, reductions with adjacent outputs (a bias
// gradient) and with adjacent reduced elements (a row sum), an embedding
// gradient whose ids repeat. Their sums run in another order than the
// reference's loops: compare in norm.
std::vector<OpCaseSpec> LargeShapeCases();

// The graph and inputs of `spec` (the graph builder's error if it is not a
// valid graph).
absl::StatusOr<OpCase> BuildCase(const OpCaseSpec& spec);

}  // namespace tandem::cuda::testing

#endif  // TANDEM_TESTS_BACKENDS_CUDA_OP_CASES_H_
