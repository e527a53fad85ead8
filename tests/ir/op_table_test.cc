// The op table (ir/op_def.h): one definition per op kind, whose names, arity,
// attributes, families and rules are what the rest of Tandem reads.
#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/graph_builder.h"
#include "ir/op_def.h"
#include "ir/shape_rules.h"

namespace tandem::ir {
namespace {

std::vector<OpKind> AllKinds() {
  std::vector<OpKind> kinds;
  for (int kind = 0; kind < kNumOpKinds; ++kind) kinds.push_back(static_cast<OpKind>(kind));
  return kinds;
}

TEST(OpTable, EveryKindHasOneDefinitionUnderAUniqueName) {
  std::set<std::string> names;
  for (OpKind kind : AllKinds()) {
    const OpDef& def = Def(kind);
    EXPECT_EQ(def.kind, kind) << def.name;
    ASSERT_NE(def.name, nullptr);
    EXPECT_TRUE(names.insert(def.name).second) << def.name << " is used twice";
    EXPECT_EQ(OpFromName(def.name), kind) << def.name;
    EXPECT_EQ(OpName(kind), std::string(def.name));
    EXPECT_EQ(OpArity(kind), def.arity);
    EXPECT_EQ(MovesAnyDType(kind), def.moves_any_dtype);
  }
  EXPECT_EQ(OpFromName("no_such_op"), std::nullopt);
}

TEST(OpTable, OnlySourcesLackAResultTypeRuleAndOnlyBackwardHelpersAGradientRule) {
  const std::set<OpKind> helpers = {OpKind::kSoftmaxGrad, OpKind::kLogSoftmaxGrad, OpKind::kNormalizeGrad,
                                    OpKind::kGeluGrad,    OpKind::kSiluGrad,       OpKind::kReluGrad,
                                    OpKind::kCrossEntropyGrad, OpKind::kEmbeddingGrad, OpKind::kAttentionGrad};
  for (OpKind kind : AllKinds()) {
    const OpDef& def = Def(kind);
    EXPECT_EQ(def.result_type == nullptr, def.family == OpFamily::kSource) << def.name;
    EXPECT_EQ(def.gradient == nullptr, helpers.count(kind) == 1) << def.name;
    EXPECT_EQ(def.arity == 0, def.family == OpFamily::kSource) << def.name;
    // An op of the unary family has one operand, of the binary family two:
    // the CUDA backend's unary and binary kernels take exactly those.
    if (def.family == OpFamily::kUnary) {
      EXPECT_EQ(def.arity, 1) << def.name;
    }
    if (def.family == OpFamily::kBinary) {
      EXPECT_EQ(def.arity, 2) << def.name;
    }
  }
}

TEST(OpTable, AttributesAreNamedOnceWithTheirKind) {
  EXPECT_EQ(Def(OpKind::kSlice).num_attributes(), 3);
  ASSERT_NE(Def(OpKind::kMatMul).FindAttribute("transpose_b"), nullptr);
  EXPECT_FALSE(Def(OpKind::kMatMul).FindAttribute("transpose_b")->required);
  EXPECT_EQ(Def(OpKind::kRotary).FindAttribute("theta")->kind, AttributeKind::kDouble);
  EXPECT_EQ(Def(OpKind::kTanh).FindAttribute("eps"), nullptr);
  for (OpKind kind : AllKinds()) {
    const OpDef& def = Def(kind);
    std::set<std::string> seen;
    for (int i = 0; i < def.num_attributes(); ++i) {
      EXPECT_TRUE(seen.insert(def.attributes[i].name).second) << def.name << "." << def.attributes[i].name;
    }
  }
}

TEST(OpTable, TheResultTypeRuleIsWhatShapeInferenceApplies) {
  const TensorType a{DType::kF32, {4, 8}}, b{DType::kF32, {8, 3}};
  absl::StatusOr<TensorType> product = InferResultType(OpKind::kMatMul, {a, b}, {});
  ASSERT_TRUE(product.ok()) << product.status();
  EXPECT_EQ(*product, (TensorType{DType::kF32, {4, 3}}));
  EXPECT_THAT(InferResultType(OpKind::kMatMul, {a, a}, {}).status().message(),
              ::testing::HasSubstr("matmul: contracting dimensions differ: 8 vs 4"));
  EXPECT_THAT(InferResultType(OpKind::kAdd, {a}, {}).status().message(),
              ::testing::HasSubstr("add: takes 2 operands, got 1"));
  EXPECT_THAT(InferResultType(OpKind::kConstant, {}, {}).status().message(),
              ::testing::HasSubstr("a source has a declared type"));
}

TEST(OpTable, CostsCountFlopsTranscendentalsAndBytes) {
  Graph graph("g");
  GraphBuilder builder(&graph);
  const ValueId a = builder.AddInput("a", "data", TensorType{DType::kF32, {2, 4, 8}}, {});
  const ValueId b = builder.AddInput("b", "data", TensorType{DType::kF32, {8, 3}}, {});
  const ValueId product = builder.Add(OpKind::kMatMul, {a, b}, {}, {});
  const ValueId e = builder.Add(OpKind::kExp, {product}, {}, {});
  ASSERT_TRUE(builder.ok()) << builder.status();
  auto cost = [&](ValueId id) {
    std::vector<TensorType> operands;
    for (ValueId operand : graph.node(id).operands) operands.push_back(graph.type(operand));
    return NodeCost(graph.node(id), operands);
  };
  // [2,4,8] x [8,3]: 2 * (2*4*3) * 8 multiply-adds' flops; 64 + 24 + 24 floats moved.
  EXPECT_EQ(cost(product).flops, 2.0 * 24 * 8);
  EXPECT_EQ(cost(product).transcendentals, 0.0);
  EXPECT_EQ(cost(product).bytes, 4.0 * (64 + 24 + 24));
  EXPECT_EQ(cost(e).flops, 0.0);
  EXPECT_EQ(cost(e).transcendentals, 24.0);
  EXPECT_EQ(cost(e).bytes, 4.0 * 48);
  EXPECT_EQ(cost(a).flops + cost(a).bytes, 0.0);  // an input is supplied, not computed
}

}  // namespace
}  // namespace tandem::ir
