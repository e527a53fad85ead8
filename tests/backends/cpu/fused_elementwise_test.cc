// The interpreter evaluates runs of elementwise nodes a piece at a time
// (backends/cpu/interpreter.cc): the same bits as node by node, whether a
// run's values are read after it (written out whole) or not, with scalars
// broadcast and a run broken by another op.
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/interpreter.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/kernels/kernel_support.h"
#include "gtest/gtest.h"
#include "ir/graph.h"
#include "ir/graph_builder.h"
#include "ir/host_tensor.h"
#include "ir/op.h"
#include "ir/op_def.h"

namespace tandem::cpu {
namespace {

ir::HostTensor Random(int64_t n, uint32_t seed) {
  std::mt19937 random(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> values(static_cast<size_t>(n));
  for (float& v : values) v = uniform(random);
  return ir::HostTensor::FromFloats({n}, values);
}

TEST(FusedElementwise, RunsGiveTheBitsOfNodeByNodeEvaluation) {
  for (const int64_t n : {int64_t{1000}, int64_t{300'001}}) {  // below and above the fusing threshold
    SCOPED_TRACE(n);
    ir::Graph graph("fused");
    ir::GraphBuilder b(&graph);
    const ir::SourceLocation here{"test", 1};
    const ir::TensorType full{ir::DType::kF32, {n}};
    const ir::ValueId a = b.AddInput("a", "data", full, here);
    const ir::ValueId x = b.AddInput("x", "data", full, here);
    const ir::ValueId s = b.AddInput("s", "data", {ir::DType::kF32, {}}, here);
    const ir::ValueId half = b.AddConstant(0.5, {ir::DType::kF32, {}}, here);
    const ir::ValueId v1 = b.Add(ir::OpKind::kMul, {a, half}, {}, here);
    const ir::ValueId v2 = b.Add(ir::OpKind::kAdd, {v1, x}, {}, here);
    const ir::ValueId v3 = b.Add(ir::OpKind::kExp, {v2}, {}, here);
    const ir::ValueId v4 = b.Add(ir::OpKind::kMul, {v3, s}, {}, here);
    const ir::ValueId v5 = b.Add(ir::OpKind::kSub, {v4, v1}, {}, here);
    const ir::ValueId v6 = b.Add(ir::OpKind::kWhere, {a, v2, v5}, {}, here);  // not fused: ends the run
    const ir::ValueId v7 = b.Add(ir::OpKind::kMul, {v6, v6}, {}, here);
    const ir::ValueId v8 = b.Add(ir::OpKind::kSqrt, {v7}, {}, here);
    const ir::ValueId v9 = b.Add(ir::OpKind::kDiv, {v8, x}, {}, here);
    const ir::ValueId v10 = b.Add(ir::OpKind::kGelu, {v9}, {}, here);
    ASSERT_TRUE(b.ok()) << b.status();
    graph.AddOutput("out", v10);
    graph.AddOutput("exp", v3);  // a run's member that is an output: written out whole

    const ir::TensorMap inputs = {{"a", Random(n, 1)}, {"x", Random(n, 2)}, {"s", ir::HostTensor::Scalar(1.75f)}};
    absl::StatusOr<ir::TensorMap> fused = RunGraph(graph, inputs);
    ASSERT_TRUE(fused.ok()) << fused.status();

    // Node by node, each kernel on whole tensors.
    std::vector<ir::HostTensor> values(static_cast<size_t>(graph.size()));
    for (ir::ValueId id = 0; id < graph.size(); ++id) {
      const ir::Node& node = graph.node(id);
      if (node.op == ir::OpKind::kInput) {
        values[id] = inputs.at(node.attributes.GetString("name"));
        continue;
      }
      std::vector<const ir::HostTensor*> operands;
      for (ir::ValueId operand : node.operands) operands.push_back(&values[operand]);
      absl::StatusOr<ir::HostTensor> value = EvaluateNode(node, operands);
      ASSERT_TRUE(value.ok()) << value.status();
      values[id] = *std::move(value);
    }
    for (const auto& [name, id] : {std::pair<std::string, ir::ValueId>{"out", v10}, {"exp", v3}}) {
      const ir::HostTensor& got = fused->at(name);
      ASSERT_EQ(got.type(), values[id].type()) << name;
      EXPECT_EQ(std::memcmp(got.data(), values[id].data(), got.num_bytes()), 0) << name;
    }
  }
}

// Every op of the unary and binary families has a per-element function
// that a fused run evaluates (a run is found by family, ir/elementwise_runs.h).
TEST(FusedElementwise, EveryUnaryAndBinaryOpRunsAPieceAtATime) {
  const float x[3] = {0.5f, 1.5f, 2.0f}, y[3] = {0.25f, -1.0f, 2.0f};
  int ops = 0;
  for (int kind = 0; kind < ir::kNumOpKinds; ++kind) {
    const ir::OpKind op = static_cast<ir::OpKind>(kind);
    const ir::OpDef& def = ir::Def(op);
    if (def.family != ir::OpFamily::kUnary && def.family != ir::OpFamily::kBinary) continue;
    ++ops;
    ASSERT_TRUE(internal::IsFusibleElementwise(op)) << ir::OpName(op);
    ir::Graph graph("one op");
    ir::GraphBuilder b(&graph);
    const ir::SourceLocation here{"test", 1};
    std::vector<ir::ValueId> operands = {b.AddInput("x", "data", {ir::DType::kF32, {3}}, here)};
    if (def.arity == 2) operands.push_back(b.AddInput("y", "data", {ir::DType::kF32, {3}}, here));
    const ir::ValueId out = b.Add(op, operands, {}, here);
    ASSERT_TRUE(b.ok()) << b.status();
    const ir::HostTensor tx = ir::HostTensor::FromFloats({3}, {x[0], x[1], x[2]});
    const ir::HostTensor ty = ir::HostTensor::FromFloats({3}, {y[0], y[1], y[2]});
    std::vector<const ir::HostTensor*> values = {&tx, &ty};
    values.resize(operands.size());
    absl::StatusOr<ir::HostTensor> whole = EvaluateNode(graph.node(out), values);
    ASSERT_TRUE(whole.ok()) << ir::OpName(op) << ": " << whole.status();
    const float* in[2] = {x, y};
    const int64_t strides[2] = {1, 1};
    float piece[3];
    internal::ElementwiseRange(op, in, strides, piece, 3);
    EXPECT_EQ(std::memcmp(piece, whole->f32(), sizeof(piece)), 0) << ir::OpName(op);
  }
  EXPECT_GE(ops, 22);
}

}  // namespace
}  // namespace tandem::cpu
