// The CUDA runner computes a linear layer's matmul and bias add as one
// cuBLASLt GEMM with the bias epilogue (CUBLASLT_EPILOGUE_BIAS) where the
// add alone reads the matmul: batched, transposed, the bias on either side,
// a GELU after it; and not where the matmul is read twice, is an output, or
// the addend is no [n] bias. On the CPU the epilogue's GEMM sums as
// cuBLAS's does, so the bits are those of the runner with fusion off, in
// f32 and bf16 precision; a shape cuBLASLt declines runs unfused, decided
// once; and the GPT's training step fuses its linear layers. On CUDA's
// execution model.
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/interpreter.h"
#include "backends/cuda/cuda_graph_runner.h"
#include "backends/cuda/cuda_on_cpu.h"
#include "examples/example_job.h"
#include "gtest/gtest.h"
#include "ir/graph.h"
#include "ir/graph_builder.h"
#include "tests/backends/cuda/graph_runner_test_util.h"

namespace tandem::cuda {
namespace {

using ir::DType;
using ir::OpKind;
using ir::ValueId;
using testing::RelativeError;

ir::HostTensor SineValues(const ir::Shape& shape, float step) {
  ir::HostTensor tensor({DType::kF32, shape});
  for (int64_t i = 0; i < tensor.num_elements(); ++i) {
    tensor.f32()[i] = std::sin(step * static_cast<float>(i + 1)) * 1.5f;
  }
  return tensor;
}

// Linear layers that fuse, and three matmuls that must not.
struct Layers {
  ir::Graph graph{"linear layers"};
  ir::TensorMap inputs;
  std::vector<std::pair<ValueId, ValueId>> fusible;  // (matmul, add)
  ValueId gelu = -1;                                 // reads a fused add
};

Layers BuildLayers() {
  Layers layers;
  ir::GraphBuilder b(&layers.graph);
  const ir::SourceLocation here = ir::MakeSourceLocation(__FILE__, __LINE__);
  auto input = [&](const char* name, const ir::Shape& shape, float step) {
    layers.inputs[name] = SineValues(shape, step);
    return b.AddInput(name, "data", {DType::kF32, shape}, here);
  };
  const ValueId x = input("x", {6, 8}, 0.7f);
  const ValueId x3 = input("x3", {2, 3, 8}, 0.45f);
  const ValueId xt = input("xt", {8, 6}, 0.3f);  // x transposed
  const ValueId w = input("w", {8, 5}, 0.31f);
  const ValueId wt = input("wt", {5, 8}, 0.53f);     // w transposed
  const ValueId w3 = input("w3", {2, 8, 5}, 0.23f);  // a weight per batch entry
  const ValueId bias = input("b", {5}, 1.3f);
  const ValueId residual = input("r", {6, 5}, 0.9f);  // an addend of the product's shape: no bias
  const ValueId row = input("row", {1, 5}, 1.1f);     // a bias of rank 2: not [n]
  auto fused_layer = [&](ValueId matmul, bool bias_first) {
    const ValueId add =
        bias_first ? b.Add(OpKind::kAdd, {bias, matmul}, {}, here) : b.Add(OpKind::kAdd, {matmul, bias}, {}, here);
    layers.fusible.emplace_back(matmul, add);
    return add;
  };
  // x @ w + b; b + x3 @ w (batched, folded into one GEMM), then GELU and a
  // scale (a fused elementwise run reading the add); xt^T @ wt^T + b;
  // x3 @ w3 + b (a strided batch).
  layers.graph.AddOutput("linear", fused_layer(b.Add(OpKind::kMatMul, {x, w}, {}, here), false));
  const ValueId batched = fused_layer(b.Add(OpKind::kMatMul, {x3, w}, {}, here), true);
  layers.gelu = b.Add(OpKind::kGelu, {batched}, {}, here);
  const ValueId half = b.AddConstant(0.5, {DType::kF32, {}}, here);
  layers.graph.AddOutput("gelu", b.Add(OpKind::kMul, {layers.gelu, half}, {}, here));
  layers.graph.AddOutput(
      "transposed",
      fused_layer(b.Add(OpKind::kMatMul, {xt, wt}, {{"transpose_a", int64_t{1}}, {"transpose_b", int64_t{1}}}, here),
                  false));
  layers.graph.AddOutput("strided", fused_layer(b.Add(OpKind::kMatMul, {x3, w3}, {}, here), false));
  // Not fused: a product read twice, a product that is an output, and
  // products plus addends that are no [n] bias.
  const ValueId twice = b.Add(OpKind::kMatMul, {x, w}, {}, here);
  layers.graph.AddOutput("read_twice",
                         b.Add(OpKind::kAdd, {b.Add(OpKind::kAdd, {twice, bias}, {}, here), twice}, {}, here));
  const ValueId shown = b.Add(OpKind::kMatMul, {x, w}, {}, here);
  layers.graph.AddOutput("product", shown);
  layers.graph.AddOutput("product_biased", b.Add(OpKind::kAdd, {shown, bias}, {}, here));
  layers.graph.AddOutput("residual",
                         b.Add(OpKind::kAdd, {b.Add(OpKind::kMatMul, {x, w}, {}, here), residual}, {}, here));
  layers.graph.AddOutput("row", b.Add(OpKind::kAdd, {b.Add(OpKind::kMatMul, {x, w}, {}, here), row}, {}, here));
  EXPECT_TRUE(b.ok()) << b.status();
  return layers;
}

std::unique_ptr<CudaGraphRunner> RunnerWith(Precision precision, bool fuse) {
  absl::StatusOr<std::unique_ptr<CudaGraphRunner>> runner =
      CudaGraphRunner::Create({.precision = precision, .fuse_elementwise = fuse});
  EXPECT_TRUE(runner.ok()) << runner.status();
  return runner.ok() ? *std::move(runner) : nullptr;
}

TEST(GraphRunnerEpilogueOnCpu, LinearLayersAddTheirBiasInTheGemmWithTheBitsOfAMatmulAndAnAdd) {
  const Layers layers = BuildLayers();
  absl::StatusOr<ir::TensorMap> reference = cpu::RunGraph(layers.graph, layers.inputs);
  ASSERT_TRUE(reference.ok()) << reference.status();
  for (const Precision precision : {Precision::kF32, Precision::kBf16}) {
    SCOPED_TRACE(precision == Precision::kF32 ? "f32" : "bf16");
    std::unique_ptr<CudaGraphRunner> fused = RunnerWith(precision, true), unfused = RunnerWith(precision, false);
    ASSERT_NE(fused, nullptr);
    ASSERT_NE(unfused, nullptr);
    absl::StatusOr<std::unique_ptr<CudaExecutable>> executable = fused->Compile(layers.graph);
    ASSERT_TRUE(executable.ok()) << executable.status();
    EXPECT_EQ((*executable)->bias_epilogues(), layers.fusible);
    // The fused adds are in no elementwise run; the GELU's run reads its
    // add as a value from outside.
    const ir::ElementwiseRuns& runs = (*executable)->fused_runs();
    for (const auto& [matmul, add] : layers.fusible) EXPECT_EQ(runs.role[add], ir::ElementwiseRuns::kNotInRun);
    EXPECT_EQ(runs.role[layers.gelu], ir::ElementwiseRuns::kInsideRun);
    EXPECT_TRUE((*unfused->Compile(layers.graph))->bias_epilogues().empty());

    const cuda_on_cpu::GemmCalls before = cuda_on_cpu::GemmCallsSoFar();
    absl::StatusOr<ir::TensorMap> one_gemm = fused->RunFromHost(layers.graph, layers.inputs);
    ASSERT_TRUE(one_gemm.ok()) << one_gemm.status();
    const cuda_on_cpu::GemmCalls after = cuda_on_cpu::GemmCallsSoFar();
    EXPECT_EQ(after.bias_epilogues - before.bias_epilogues, 4);
    EXPECT_EQ(fused->bias_epilogue_launches(), 4);
    // Every matmul is one GEMM either way (eight, on bf16 operands in bf16
    // precision).
    const int64_t gemms = precision == Precision::kBf16 ? after.bf16_operands - before.bf16_operands
                                                        : after.f32_operands - before.f32_operands;
    EXPECT_EQ(gemms, 8);

    absl::StatusOr<ir::TensorMap> matmul_then_add = unfused->RunFromHost(layers.graph, layers.inputs);
    ASSERT_TRUE(matmul_then_add.ok()) << matmul_then_add.status();
    EXPECT_EQ(unfused->bias_epilogue_launches(), 0);
    // bf16 operands: within their rounding (2^-8 relative each) of the
    // reference's f32 products.
    const double tolerance = precision == Precision::kF32 ? 1e-5 : 2e-2;
    ASSERT_EQ(one_gemm->size(), reference->size());
    for (const auto& [name, expected] : *reference) {
      EXPECT_TRUE(one_gemm->at(name).BitwiseEquals(matmul_then_add->at(name))) << name;
      EXPECT_LE(RelativeError(one_gemm->at(name), expected), tolerance) << name;
    }
    // The plans are kept: a second run asks nothing again and gives the
    // same bits.
    absl::StatusOr<ir::TensorMap> again = fused->RunFromHost(layers.graph, layers.inputs);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(fused->bias_epilogue_launches(), 8);
    for (const auto& [name, tensor] : *one_gemm) EXPECT_TRUE(again->at(name).BitwiseEquals(tensor)) << name;
  }
}

// The CPU cuBLASLt table declining the bias epilogue for as long as it lives.
class DeclinedBiasEpilogues {
 public:
  explicit DeclinedBiasEpilogues(cuda_on_cpu::BiasEpilogueAnswer how) { cuda_on_cpu::SetBiasEpilogueAnswer(how); }
  ~DeclinedBiasEpilogues() { cuda_on_cpu::SetBiasEpilogueAnswer(cuda_on_cpu::BiasEpilogueAnswer::kTaken); }
  DeclinedBiasEpilogues(const DeclinedBiasEpilogues&) = delete;
  DeclinedBiasEpilogues& operator=(const DeclinedBiasEpilogues&) = delete;
};

// A shape cuBLASLt does not take, whether its heuristic finds no algorithm
// or its matmul refuses at launch, runs as the matmul and the add with the
// unfused runner's bits; cuBLASLt is asked once per shape, and a shape it
// refused is never launched with the epilogue again.
TEST(GraphRunnerEpilogueOnCpu, AShapeCublasLtDeclinesRunsAsAMatmulAndAnAddAndIsNotAskedAgain) {
  const Layers layers = BuildLayers();
  std::unique_ptr<CudaGraphRunner> unfused = RunnerWith(Precision::kF32, false);
  ASSERT_NE(unfused, nullptr);
  absl::StatusOr<ir::TensorMap> expected = unfused->RunFromHost(layers.graph, layers.inputs);
  ASSERT_TRUE(expected.ok()) << expected.status();
  for (const cuda_on_cpu::BiasEpilogueAnswer how :
       {cuda_on_cpu::BiasEpilogueAnswer::kNoAlgorithm, cuda_on_cpu::BiasEpilogueAnswer::kNotSupportedAtLaunch}) {
    const bool at_launch = how == cuda_on_cpu::BiasEpilogueAnswer::kNotSupportedAtLaunch;
    SCOPED_TRACE(at_launch ? "declined at launch" : "no algorithm");
    const DeclinedBiasEpilogues declined(how);
    std::unique_ptr<CudaGraphRunner> fused = RunnerWith(Precision::kF32, true);
    ASSERT_NE(fused, nullptr);
    absl::StatusOr<std::unique_ptr<CudaExecutable>> executable = fused->Compile(layers.graph);
    ASSERT_TRUE(executable.ok()) << executable.status();
    EXPECT_EQ((*executable)->bias_epilogues(), layers.fusible);  // planned fused; declined when run

    const cuda_on_cpu::GemmCalls before = cuda_on_cpu::GemmCallsSoFar();
    absl::StatusOr<ir::TensorMap> outputs = fused->RunFromHost(layers.graph, layers.inputs);
    ASSERT_TRUE(outputs.ok()) << outputs.status();
    const cuda_on_cpu::GemmCalls between = cuda_on_cpu::GemmCallsSoFar();
    absl::StatusOr<ir::TensorMap> again = fused->RunFromHost(layers.graph, layers.inputs);
    ASSERT_TRUE(again.ok()) << again.status();
    const cuda_on_cpu::GemmCalls after = cuda_on_cpu::GemmCallsSoFar();

    // The first run asks once per GEMM shape (the four pairs have three:
    // x @ w and the folded x3 @ w are one), and a shape refused at launch
    // was tried once; the second run asks and tries nothing.
    const int64_t asked = between.bias_epilogue_heuristics - before.bias_epilogue_heuristics;
    EXPECT_EQ(asked, 3);
    EXPECT_EQ(between.bias_epilogues_declined_at_launch - before.bias_epilogues_declined_at_launch,
              at_launch ? asked : 0);
    EXPECT_EQ(after.bias_epilogue_heuristics, between.bias_epilogue_heuristics);
    EXPECT_EQ(after.bias_epilogues_declined_at_launch, between.bias_epilogues_declined_at_launch);
    EXPECT_EQ(after.bias_epilogues, before.bias_epilogues);
    EXPECT_EQ(fused->bias_epilogue_launches(), 0);
    // Eight matmuls a run, each one plain GEMM.
    EXPECT_EQ(between.f32_operands - before.f32_operands, 8);
    EXPECT_EQ(after.f32_operands - between.f32_operands, 8);
    ASSERT_EQ(outputs->size(), expected->size());
    for (const auto& [name, tensor] : *expected) {
      EXPECT_TRUE(outputs->at(name).BitwiseEquals(tensor)) << name;
      EXPECT_TRUE(again->at(name).BitwiseEquals(tensor)) << name;
    }
  }
}

// The GPT's linear layers (qkv, the attention's projection, the MLP's two)
// are fused in its training step's microbatch graph; the LLaMA's have no
// bias, so none of its matmuls is.
TEST(GraphRunnerEpilogueOnCpu, TheGptsLinearLayersFuseTheLlamasHaveNoBias) {
  for (const char* model : {"gpt", "llama"}) {
    SCOPED_TRACE(model);
    examples::ExampleJobOptions options;
    options.model = model;
    options.layers = 2;
    options.dim = 16;
    options.heads = 2;
    options.seq = 8;
    options.batch = 2;
    options.microbatches = 1;
    absl::StatusOr<examples::ExampleJob> job = examples::MakeExampleJob(options);
    ASSERT_TRUE(job.ok()) << job.status();
    std::unique_ptr<CudaGraphRunner> runner = RunnerWith(Precision::kF32, true);
    ASSERT_NE(runner, nullptr);
    absl::StatusOr<std::unique_ptr<CudaExecutable>> executable = runner->Compile(job->step.microbatch);
    ASSERT_TRUE(executable.ok()) << executable.status();
    const size_t fused = (*executable)->bias_epilogues().size();
    if (std::string(model) == "gpt") {
      // Four linear layers a block (qkv, proj, fc, proj) and the head, at least.
      EXPECT_GE(fused, 4u * 2u) << fused;
    } else {
      EXPECT_EQ(fused, 0u);
    }
  }
}

}  // namespace
}  // namespace tandem::cuda
