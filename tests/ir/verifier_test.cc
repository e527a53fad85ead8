// The verifier rejects malformed graphs with a message naming the value.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/verifier.h"

namespace tandem::ir {
namespace {

using ::testing::HasSubstr;

Node Input(const std::string& name, TensorType type) {
  Node node;
  node.op = OpKind::kInput;
  node.attributes = Attributes{{"name", name}, {"role", std::string("data")}};
  node.type = std::move(type);
  return node;
}

Node Op(OpKind op, std::vector<ValueId> operands, TensorType type, Attributes attributes = {}) {
  Node node;
  node.op = op;
  node.operands = std::move(operands);
  node.type = std::move(type);
  node.attributes = std::move(attributes);
  return node;
}

const TensorType kF32x23{DType::kF32, {2, 3}};

TEST(Verifier, AcceptsWellFormedGraph) {
  Graph graph("g");
  graph.Append(Input("a", kF32x23));
  graph.Append(Op(OpKind::kTanh, {0}, kF32x23));
  graph.AddOutput("out", 1);
  EXPECT_TRUE(VerifyGraph(graph).ok()) << VerifyGraph(graph);
}

TEST(Verifier, RejectsWrongResultType) {
  Graph graph("g");
  graph.Append(Input("a", kF32x23));
  graph.Append(Op(OpKind::kReduceSum, {0}, kF32x23, Attributes{{"axes", std::vector<int64_t>{1}}}));
  EXPECT_THAT(VerifyGraph(graph).message(),
              HasSubstr("%1 = reduce_sum: declared type f32[2,3] but the op gives f32[2]"));
}

TEST(Verifier, RejectsOperandThatIsNotEarlier) {
  Graph graph("g");
  graph.Append(Input("a", kF32x23));
  graph.Append(Op(OpKind::kTanh, {1}, kF32x23));
  EXPECT_THAT(VerifyGraph(graph).message(), HasSubstr("operand %1 is not an earlier value"));
}

TEST(Verifier, RejectsMissingAttributeWithoutCrashing) {
  Graph graph("g");
  graph.Append(Input("a", kF32x23));
  graph.Append(Op(OpKind::kTranspose, {0}, TensorType{DType::kF32, {3, 2}}));
  EXPECT_THAT(VerifyGraph(graph).message(), HasSubstr("attribute 'permutation' is missing"));
}

TEST(Verifier, RejectsAnOptionalAttributeOfTheWrongKind) {
  // matmul reads transpose_a as an int when present; a double there would
  // otherwise reach the shape rule's typed getter.
  Graph graph("g");
  graph.Append(Input("a", kF32x23));
  graph.Append(Input("b", TensorType{DType::kF32, {3, 2}}));
  graph.Append(Op(OpKind::kMatMul, {0, 1}, TensorType{DType::kF32, {2, 2}}, Attributes{{"transpose_a", 1.0}}));
  EXPECT_THAT(VerifyGraph(graph).message(),
              HasSubstr("attribute 'transpose_a' is of the wrong kind (matmul reads an attribute of kind int)"));
}

TEST(Verifier, RejectsForwardReadOfLaterStage) {
  Graph graph("g");
  graph.Append(Input("a", kF32x23));
  Node later = Op(OpKind::kTanh, {0}, kF32x23);
  later.stage = 2;
  graph.Append(later);
  Node earlier = Op(OpKind::kExp, {1}, kF32x23);
  earlier.stage = 1;
  graph.Append(earlier);
  EXPECT_THAT(VerifyGraph(graph).message(), HasSubstr("forward op of stage 1 reads %1 of the later stage 2"));
}

TEST(Verifier, RejectsDuplicateInputsAndOutputs) {
  Graph inputs("g");
  inputs.Append(Input("a", kF32x23));
  inputs.Append(Input("a", kF32x23));
  EXPECT_THAT(VerifyGraph(inputs).message(), HasSubstr("input 'a' declared twice"));
  Graph outputs("g");
  outputs.Append(Input("a", kF32x23));
  outputs.AddOutput("x", 0);
  outputs.AddOutput("x", 0);
  EXPECT_THAT(VerifyGraph(outputs).message(), HasSubstr("output 'x' appears twice"));
}

TEST(Verifier, RejectsParameterWithoutStateEntry) {
  TrainStep step;
  Node parameter = Input("w", kF32x23);
  parameter.attributes.Set("role", std::string("parameter"));
  step.microbatch.Append(parameter);
  EXPECT_THAT(VerifyTrainStep(step).message(), HasSubstr("parameter 'w' is used but never declared"));
}

}  // namespace
}  // namespace tandem::ir
